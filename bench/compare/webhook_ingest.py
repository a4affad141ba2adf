"""Webhook ingest over HTTP, ours against the peer's: signed GitHub deliveries to
``/webhooks/github`` (Action Llama's URL, which both serve), matched (``issues`` opened, one
agent takes it) and unmatched (``push``), with 1 and 16 concurrent senders on keep-alive
connections. Reports deliveries per second and p99 latency, and the scheduler's CPU time per
delivery (its process tree), each the median of interleaved rounds (see common.py).

Both schedulers are paused (``al pause``), so what is measured is the ingest path (verify,
route, durably queue, answer), not runs competing for the CPU; the queue bound
(``workQueueSize``) is reached, so dropping the oldest item is part of the path too.

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/webhook_ingest.py
        [--requests N] [--rounds N] [--senders 1 4 16 64] [--plots DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import statistics
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from common import (
    SECRET,
    TOOLS,
    credentials,
    emit,
    free_port,
    interleaved,
    line,
    make_project,
    run_cli,
    scheduler,
    tree_cpu,
)
from plot import svg

EVENTS = {
    "matched": ("issues", {"action": "opened", "issue": {"number": 1, "title": "t", "body": ""}}),
    "unmatched": ("push", {"ref": "refs/heads/main", "commits": []}),
}


def delivery(event: str, payload: dict) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {**payload, "repository": {"full_name": "bench/repo", "name": "repo"},
         "sender": {"login": "bench"}, "organization": {"login": "bench"}}
    ).encode()  # fmt: skip
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": f"sha256={signature}",
    }
    return body, headers


def send(port: int, kind: str, count: int, latencies: list[float], errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    event, payload = EVENTS[kind]
    for _ in range(count):
        body, headers = delivery(event, payload)
        start = time.perf_counter()
        conn.request("POST", "/webhooks/github", body=body, headers=headers)
        reply = conn.getresponse()
        reply.read()
        latencies.append(time.perf_counter() - start)
        if reply.status >= 300:
            errors.append(f"HTTP {reply.status}")
    conn.close()


def load_test(pid: int, port: int, kind: str, senders: int, total: int) -> dict[str, float]:
    latencies: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=send, args=(port, kind, total // senders, latencies, errors))
        for _ in range(senders)
    ]
    cpu, start = tree_cpu(pid), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - start, tree_cpu(pid) - cpu
    if errors:
        raise SystemExit(f"{len(errors)} deliveries refused, e.g. {errors[0]}")
    latencies.sort()
    return {
        "rate": len(latencies) / elapsed,
        "p99": latencies[int(0.99 * (len(latencies) - 1))],
        "cpu": cpu / len(latencies),
    }


def figures(
    up: dict, kind: str, senders: int, requests: int, rounds: int, curve: dict | None = None
) -> list[str]:
    found: dict[str, list[dict[str, float]]] = {tool: [] for tool in TOOLS}

    def measure(tool: str) -> float:
        running = up[tool]
        result = load_test(running.proc.pid, running.port, kind, senders, requests)
        found[tool].append(result)
        return result["rate"]

    rates = interleaved(rounds, measure)
    p99 = {tool: [r["p99"] for r in found[tool]] for tool in TOOLS}
    cpu = {tool: [r["cpu"] for r in found[tool]] for tool in TOOLS}
    if curve is not None:  # (kind, figure) -> tool -> senders -> median
        for figure, values in (("rate", rates), ("p99", p99), ("cpu", cpu)):
            for tool in TOOLS:
                median = statistics.median(values[tool])
                curve.setdefault((kind, figure), {}).setdefault(tool, {})[senders] = median
    name = f"webhook {kind}, c={senders}"
    return [
        line(f"{name}, throughput", rates, "deliveries/s"),
        line(f"{name}, p99", p99, "ms", 1000),
        line(f"{name}, scheduler CPU per delivery", cpu, "ms", 1000),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--senders", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--plots", type=Path, help="write curve-ingest-*.svg there")
    args = parser.parse_args()
    curve: dict = {}
    lines = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        up = {}
        for tool in TOOLS:
            port = free_port()
            root = make_project(Path(tmp) / tool, 1, port)
            env = credentials(Path(tmp) / f"{tool}-credentials")
            up[tool] = stack.enter_context(scheduler(tool, root, port, env))
            run_cli(tool, ["pause"], root, env)
        for kind in EVENTS:
            for senders in args.senders:
                lines += figures(up, kind, senders, args.requests, args.rounds, curve)
    emit(lines)
    if args.plots:
        units = {"rate": "deliveries/s", "p99": "p99 seconds", "cpu": "scheduler CPU s/delivery"}
        for (kind, figure), by_tool in curve.items():
            series = {tool: [by_tool[tool][c] for c in args.senders] for tool in TOOLS}
            title = f"webhook {kind}: {units[figure]}"
            svg(args.plots / f"curve-ingest-{kind}-{figure}.svg", title, args.senders, series,
                "concurrent senders", units[figure])  # fmt: skip


if __name__ == "__main__":
    main()

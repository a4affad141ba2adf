"""Signed-webhook ingest: throughput and latency of POST /webhooks/<source> on `al start`.

A real scheduler process serves a temporary project on 127.0.0.1 with one GitHub source and one
matching agent. The scheduler is paused, so every delivery is verified, deduplicated, routed,
committed to the SQLite queue and receipted (durable before the 202) without runs competing for
the CPU. A bounded load loop of a few client threads with keep-alive sessions sends distinct,
correctly signed pull_request deliveries; every answer must be 202 and every item queued.

    python bench/webhook_ingest.py [--requests N] [--threads T]
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

SECRET = "bench-secret"
CONFIG = """
workQueueSize = 100000

[models.scripted]
provider = "scripted"
model = "scripted"

[gateway]
port = 0

[webhooks.github]
type = "github"
"""
AGENT = """
models = ["scripted"]

[[webhooks]]
source = "github"
events = ["pull_request"]
actions = ["opened"]
repos = ["acme/widgets"]
"""


def make_project(root: Path) -> None:
    (root / "agents" / "reviewer").mkdir(parents=True)
    (root / "config.toml").write_text(CONFIG)
    (root / "agents" / "reviewer" / "SKILL.md").write_text(
        "---\nname: reviewer\ndescription: bench\n---\nReview.\n"
    )
    (root / "agents" / "reviewer" / "config.toml").write_text(AGENT)


def start_scheduler(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    with open(root / "scheduler.log", "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "llamaherd", "--project", str(root), "start"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, "AL_LOG_LEVEL": "WARNING"},
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            info = json.loads((root / ".al" / "scheduler.json").read_text())
            if info["pid"] == proc.pid:
                return proc, info["url"]
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"scheduler did not start: {(root / 'scheduler.log').read_text()}")


def start_signed_scheduler(root: Path, credentials: Path) -> tuple[subprocess.Popen, str]:
    """``start_scheduler`` with the GitHub source's signing secret in a credential store of
    its own (``credentials``)."""
    from llamaherd.credentials import CredentialStore

    CredentialStore(credentials).write("github_webhook_secret", "default", {"secret": SECRET})
    return start_scheduler(root, {**os.environ, "AL_CREDENTIALS_DIR": str(credentials)})


def delivery(n: int, number: int | None = None) -> tuple[bytes, dict[str, str]]:
    """Delivery ``n`` (its id and title, so each body is unique: a repeated signed body is a
    replay, dropped), about pull request ``number`` (``n`` when not given)."""
    number = n if number is None else number
    body = json.dumps(
        {
            "action": "opened",
            "number": number,
            "pull_request": {
                "number": number,
                "title": f"Change {n}",
                "base": {"ref": "main"},
                "user": {"login": "alice"},
                "labels": [{"name": "bench"}],
            },
            "repository": {"full_name": "acme/widgets", "owner": {"login": "acme"}},
            "sender": {"login": "alice"},
        }
    ).encode()
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": f"bench-{n}",
        "X-Hub-Signature-256": f"sha256={signature}",
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, numbers: list[int], latencies: list[float], errors: list[str]) -> None:
    session = requests.Session()
    for n in numbers:
        body, headers = delivery(n)
        start = time.perf_counter()
        response = session.post(url, data=body, headers=headers, timeout=30)
        latencies.append(time.perf_counter() - start)
        if response.status_code != 202:
            errors.append(f"{n}: HTTP {response.status_code} {response.text[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        make_project(root)
        proc, base = start_signed_scheduler(root, Path(tmp) / "credentials")
        try:
            token = (root / ".al" / "control-token").read_text().strip()
            requests.post(
                f"{base}/control/pause",
                json={},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            ).raise_for_status()
            url = f"{base}/webhooks/github"
            load(url, list(range(-50, 0)), [], [])  # warm-up: connections, caches, SQLite pages
            latencies: list[float] = []
            errors: list[str] = []
            shares = [list(range(i, args.requests, args.threads)) for i in range(args.threads)]
            threads = [
                threading.Thread(target=load, args=(url, share, latencies, errors))
                for share in shares
            ]
            cpu_before = cpu_seconds(proc.pid)
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            server_cpu = cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        from llamaherd.store import Store

        store = Store.open("sqlite:///.al/work-queue.db", str(root))
        queued = store.queue_depth().get("reviewer", 0)
        store.close()
    if errors:
        raise SystemExit(f"{len(errors)} failed deliveries, e.g. {errors[0]}")
    if queued != args.requests + 50:
        raise SystemExit(f"expected {args.requests + 50} queued items, found {queued}")
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"deliveries: {args.requests} signed, {args.threads} client threads, all 202 and queued durably"
    )
    print(f"throughput: {args.requests / elapsed:,.0f} deliveries/s")
    print(
        f"scheduler CPU per delivery: {server_cpu / args.requests * 1000:.2f} ms; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"latency p50: {cuts[49] * 1000:.1f} ms, p99: {cuts[98] * 1000:.1f} ms, max: {max(latencies) * 1000:.1f} ms"
    )
    print(
        f"webhook ingest: {args.requests / elapsed:,.0f}/s, p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()

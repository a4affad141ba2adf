"""How costs grow with the number of agents, ours against the peer's: at each count (1, 200,
1,000 and 5,000 by default) start → healthy ``/health`` and → agents loaded, idle CPU (the
process tree's over a window once start-up work has settled, and how long that took),
resident memory (the tree's RSS), ``al stat`` with the scheduler up (wall and CPU of the
command), and for ours the dispatch latency (``POST /control/run`` answered
once the run started: enqueue, wake-up, claim; the peer has no such answer). One table line per
figure and, with ``--plots DIR``, one SVG plot per figure (``curve-<figure>.svg``).

    python bench/compare/curves.py [--agents 1 200 1000 5000] [--peer-max 1000]
        [--window SECONDS] [--plots docs/img]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import common
from common import (
    credentials,
    free_port,
    load,
    make_project,
    run_cli,
    scheduler,
    tree_cpu,
    tree_rss,
)
from plot import svg

SETTLE_STEP = 2.0  # seconds of each look while start-up work goes on after /health
SETTLE_BUSY = 2.0  # % of a core above which a look says it has not settled yet
SETTLE_MAX = 600.0
FIGURES = {  # key: (title, unit)
    "start": ("start → /health", "ms"),
    "ready": ("start → agents loaded (/health without `loading`)", "ms"),
    "settle": ("/health → settled (start-up work done)", "ms"),
    "idle": ("idle CPU", "% of a core"),
    "rss": ("resident memory", "MiB"),
    "stat": ("al stat, scheduler up (CPU of the command)", "ms"),
    "dispatch": ("dispatch: POST /control/run → run started", "ms"),
}


def settle(pid: int) -> float:
    """Seconds after /health until the tree used under ``SETTLE_BUSY`` % of a core for a
    whole ``SETTLE_STEP`` (start-up work that goes on after it answers: preparing each agent's
    runtime, the first look of live reload), ``SETTLE_MAX`` at most."""
    start = time.perf_counter()
    while time.perf_counter() - start < SETTLE_MAX:
        before = tree_cpu(pid)
        time.sleep(SETTLE_STEP)
        if 100 * (tree_cpu(pid) - before) / SETTLE_STEP < SETTLE_BUSY:
            break
    return time.perf_counter() - start


def dispatch_ms(root: Path, port: int, samples: int = 5) -> float:
    """Median milliseconds of ``POST /control/run`` answered once the run started (ours).
    Each run holds a slot until its model call fails (no network here): the agents' scale of
    10 leaves room for every sample."""
    token = (root / ".al" / "control-token").read_text().strip()
    found = []
    for _ in range(samples):
        body = json.dumps({"agent": "agent-0000", "started_within": 10}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/control/run",
            data=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as reply:
            answer = json.loads(reply.read())
        found.append(time.perf_counter() - start)
        assert answer.get("runs", [None])[0], answer
    return 1000 * statistics.median(found)


def measure(tool: str, count: int, window: float) -> dict[str, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        root = make_project(Path(tmp) / "project", count, port, scale=10)
        env = credentials(Path(tmp) / "credentials")
        with scheduler(tool, root, port, env) as running:
            pid = running.proc.pid
            settled = settle(pid)
            before, start = tree_cpu(pid), time.perf_counter()
            time.sleep(window)
            idle = 100 * (tree_cpu(pid) - before) / (time.perf_counter() - start)
            rss = tree_rss(pid) / 2**20  # MiB
            stats = [run_cli(tool, ["stat"], root, env)[1] for _ in range(3)]
            dispatch = dispatch_ms(root, port) if tool == "ours" else None
        return {
            "start": 1000 * running.started_in,
            "ready": 1000 * running.ready_in,
            "settle": 1000 * settled,
            "idle": idle,
            "rss": rss,
            "stat": 1000 * statistics.median(stats),
            "dispatch": dispatch,
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 200, 1000, 5000])
    parser.add_argument("--peer-max", type=int, default=1000, help="largest count for the peer")
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--plots", type=Path)
    args = parser.parse_args()
    common.START_TIMEOUT = 1800.0  # thousands of agents take the peer minutes
    results: dict[str, dict[int, dict[str, float | None]]] = {"ours": {}, "peer": {}}
    for count in args.agents:
        for tool in ("ours", "peer"):
            if tool == "peer" and count > args.peer_max:
                continue
            results[tool][count] = found = measure(tool, count, args.window)
            figures = ", ".join(f"{k} {v:,.1f}" for k, v in found.items() if v is not None)
            print(f"{tool}, {count} agents: {figures} ({load()})", flush=True)
    for key, (title, unit) in FIGURES.items():
        print(f"\n{title} ({unit})\n| agents | ours | peer | ratio |\n|---|---|---|---|")
        for count in args.agents:
            ours = results["ours"].get(count, {}).get(key)
            peer = results["peer"].get(count, {}).get(key)
            ratio = f"{ours / peer:.2f}" if ours is not None and peer else "—"
            cells = [f"{v:,.1f}" if v is not None else "—" for v in (ours, peer)]
            print(f"| {count:,} | {cells[0]} | {cells[1]} | {ratio} |")
        if args.plots:
            series = {
                tool: [results[tool].get(count, {}).get(key) for count in args.agents]
                for tool in ("ours", "peer")
            }
            series = {tool: ys for tool, ys in series.items() if any(y is not None for y in ys)}
            svg(args.plots / f"curve-{key}.svg", title, args.agents, series, "agents", unit)


if __name__ == "__main__":
    main()

"""An idle scheduler, ours against the peer's, with 1 and with 200 agents: start → healthy
``/health``, steady idle CPU (the process tree's CPU time over a window after it settled), and
``SIGTERM`` → exit. Interleaved rounds (see common.py).

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/idle.py [--agents 1 200]
        [--rounds N] [--window SECONDS]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import (
    credentials,
    emit,
    free_port,
    interleaved,
    line,
    make_project,
    scheduler,
    tree_cpu,
)

SETTLE = 5.0  # seconds after /health answers before the idle window (start-up work ends)


def figures(count: int, rounds: int, window: float) -> list[str]:
    starts: dict[str, list[float]] = {}
    stops: dict[str, list[float]] = {}

    def measure(tool: str) -> float:
        """One start, idle window and stop; returns the idle CPU share (% of one core)."""
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            root = make_project(Path(tmp) / "project", count, port)
            env = credentials(Path(tmp) / "credentials")
            with scheduler(tool, root, port, env) as running:
                starts.setdefault(tool, []).append(running.started_in)
                time.sleep(SETTLE)
                before, start = tree_cpu(running.proc.pid), time.perf_counter()
                time.sleep(window)
                used = tree_cpu(running.proc.pid) - before
                share = 100 * used / (time.perf_counter() - start)
                stops.setdefault(tool, []).append(running.stop())
            return share

    idle = interleaved(rounds, measure)
    return [
        line(f"start → health, {count} agent(s)", starts, "ms", 1000),
        line(f"idle CPU, {count} agent(s)", idle, "% of a core"),
        line(f"SIGTERM → exit, idle, {count} agent(s)", stops, "ms", 1000),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    emit([text for count in args.agents for text in figures(count, args.rounds, args.window)])


if __name__ == "__main__":
    main()

"""`al stat` with the scheduler up, ours against the peer's, with 1 and with 200 agents: wall
and CPU time of the command as a user runs it in the project directory. Interleaved rounds
(see common.py).

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/stat.py [--agents 1 200]
        [--rounds N]
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path

from common import TOOLS, credentials, emit, free_port, interleaved, line, make_project, run_cli
from common import scheduler as start


def figures(count: int, rounds: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        roots, envs = {}, {}
        for tool in TOOLS:  # each its own project copy and port, both up at once
            port = free_port()
            roots[tool] = make_project(Path(tmp) / tool, count, port)
            envs[tool] = credentials(Path(tmp) / f"{tool}-credentials")
            stack.enter_context(start(tool, roots[tool], port, envs[tool]))
        for tool in TOOLS:
            run_cli(tool, ["stat"], roots[tool], envs[tool])  # warm up
        cpus: dict[str, list[float]] = {}

        def measure(tool: str) -> float:
            wall, cpu = run_cli(tool, ["stat"], roots[tool], envs[tool])
            cpus.setdefault(tool, []).append(cpu)
            return wall

        walls = interleaved(rounds, measure)
    return [
        line(f"al stat, scheduler up, {count} agent(s), wall", walls, "ms", 1000),
        line(f"al stat, scheduler up, {count} agent(s), CPU of the command", cpus, "ms", 1000),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 200])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    emit([text for count in args.agents for text in figures(count, args.rounds)])


if __name__ == "__main__":
    main()

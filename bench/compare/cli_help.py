"""`al --help`, ours against the peer's: wall time and CPU time of the whole process, warm file
cache, interleaved rounds (see common.py). ``--cold`` drops the page cache before every run
(root only; it slows every process on the machine for a moment).

    AL_PEER_BIN=/work/peer/node_modules/.bin/al python bench/compare/cli_help.py [--rounds N] [--cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from common import emit, interleaved, line, run_cli


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def measure(tool: str) -> float:
            if args.cold:
                drop_caches()
            wall, cpu = run_cli(tool, ["--help"], root, dict(os.environ))
            cpus.setdefault(tool, []).append(cpu)
            return wall

        for tool in ("ours", "peer"):  # once each first: the page cache, as on a used machine
            run_cli(tool, ["--help"], root, dict(os.environ))
        walls = interleaved(args.rounds, measure)
    kind = "cold" if args.cold else "warm"
    emit(
        [
            line(f"al --help {kind}, wall", walls, "ms", 1000),
            line(f"al --help {kind}, CPU", cpus, "ms", 1000),
        ]
    )


if __name__ == "__main__":
    main()

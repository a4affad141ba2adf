"""Cold start of `al --help` with every installed plugin: median wall time of fresh processes.

Usage: python bench/cli_cold_start.py [RUNS]   (default 20). Aim: < 300 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

AL = Path(sys.executable).with_name("al")


def once() -> float:
    start = time.perf_counter()
    subprocess.run([str(AL), "--help"], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    once()  # fill the OS page cache and stevedore's entry-point cache, as on any used machine
    times = sorted(once() for _ in range(runs))
    print(f"runs: {runs}, min {times[0] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms")
    print(f"al --help cold start (median of {runs}): {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

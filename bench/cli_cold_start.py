"""Cold start of `al --help` with every installed plugin: median wall time of fresh processes.

Usage: python bench/cli_cold_start.py [RUNS]   (default 20). Aim: < 300 ms.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

AL = Path(sys.executable).with_name("al")


def once() -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one `al --help`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([str(AL), "--help"], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    once()  # fill the OS page cache and stevedore's entry-point cache, as on any used machine
    samples = [once() for _ in range(runs)]
    times = sorted(wall for wall, _ in samples)
    cpu = statistics.median(cpu for _, cpu in samples)
    # CPU time is what the machine's other load cannot inflate; wall time is what users feel.
    print(f"runs: {runs}, wall min {times[0] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms")
    print(f"median CPU time: {cpu * 1000:.0f} ms")
    print(f"al --help cold start (median of {runs}): {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

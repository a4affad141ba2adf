"""Run every benchmark in bench/ (or those named) and print each one's figure, its last line.

Each script runs in its own process with this interpreter, one after the other (they measure
CPU and latency, so they must not compete). A script that fails is reported with its last error
line and the run goes on; the exit status is 1 if any failed. The machine and its load average
are printed first, since every figure depends on them.

    python bench/run_all.py [NAME ...]        (e.g. queue_throughput cli_cold_start)
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
TIMEOUT = 1800.0  # seconds per script


def scripts(names: list[str]) -> list[Path]:
    found = sorted(p for p in BENCH.glob("*.py") if p.name != Path(__file__).name)
    if not names:
        return found
    wanted = {name.removesuffix(".py") for name in names}
    unknown = wanted - {p.stem for p in found}
    if unknown:
        raise SystemExit(f"no such benchmark: {', '.join(sorted(unknown))}")
    return [p for p in found if p.stem in wanted]


def run(script: Path) -> tuple[bool, str, float]:
    """(ok, figure or error line, seconds) of one script."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT:g} s", time.perf_counter() - start
    elapsed = time.perf_counter() - start
    out = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode == 0 and out:
        return True, out[-1], elapsed
    err = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    return False, f"exit {done.returncode}: {err[-1] if err else 'no output'}", elapsed


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    chosen = scripts(sys.argv[1:])
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} x {cpu_model()}, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
    )
    failed = 0
    for script in chosen:
        ok, line, seconds = run(script)
        failed += not ok
        status = "" if ok else "FAILED "
        print(f"{script.stem} ({seconds:.0f} s, load {os.getloadavg()[0]:.1f}): {status}{line}")
        sys.stdout.flush()
    print(f"benchmarks: {len(chosen) - failed} of {len(chosen)} ran")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

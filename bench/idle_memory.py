"""Resident memory of an idle scheduler (`al start`) with 1 and with 1,000 agents.

Each project is generated offline (scripted provider, host-user runtime as the current user,
like ``llamaherd.testing.OfflineProject``); every agent has a yearly cron schedule without
catch-up, so the triggers, the dispatcher and the HTTP server (``[gateway] port = 0``) are all
up while nothing runs. RSS is read from /proc once it has settled (no change over 2 s).

    python bench/idle_memory.py [AGENTS ...]      (default: 1 1000)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamaherd.testing import OfflineProject

SETTLE_SECONDS = 2.0
START_TIMEOUT = 60.0


def make_project(root: Path, count: int) -> OfflineProject:
    project = OfflineProject(root)
    for i in range(count):
        project.add_scripted_agent(
            f"agent-{i:04d}", 'schedule = "0 0 1 1 *"\ncatchUp = false\n'
        )  # fmt: skip
    return project


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_until_up(root: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            if json.loads((root / ".al" / "scheduler.json").read_text())["pid"] == proc.pid:
                return
        except (OSError, ValueError, KeyError):
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"scheduler did not start:\n{(root / 'scheduler.log').read_text()}")


def settled_rss(pid: int, timeout: float = 30.0) -> int:
    """RSS once it stays the same for SETTLE_SECONDS (or the last value after ``timeout``)."""
    last, since = rss_kib(pid), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = rss_kib(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLE_SECONDS:
            break
    return last


def measure(count: int) -> int:
    """Idle RSS (KiB) of a scheduler serving ``count`` agents."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        make_project(root, count)
        with open(root / "scheduler.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "llamaherd", "--project", str(root), "start"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "AL_LOG_LEVEL": "WARNING"},
            )
        try:
            wait_until_up(root, proc)
            return settled_rss(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def main() -> None:
    counts = [int(arg) for arg in sys.argv[1:]] or [1, 1000]
    figures = []
    for count in counts:
        kib = measure(count)
        print(f"{count} agent(s): idle RSS {kib / 1024:.1f} MiB")
        figures.append(f"{count} agent(s) {kib / 1024:.1f} MiB")
    print(f"scheduler idle RSS: {', '.join(figures)}")


if __name__ == "__main__":
    main()

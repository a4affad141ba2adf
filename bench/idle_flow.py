"""An idle scheduler whose agents all have flow control and budgets: wake-ups and CPU.

200 agents (default), each with a webhook, a debounce, a throttle and a daily budget; nothing
is due. Once the scheduler has settled (no thread woke for a second), every thread's voluntary
context switches and the process's CPU time are read over a window (30 s default). Issue 39's
aim: 0 wake-ups and 0.0 % CPU, as without flow control (its timers are armed only for what is
due, never polled).

    python bench/idle_flow.py [AGENTS] [WINDOW_SECONDS]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamaherd.testing import OfflineProject, settled, thread_switches

CONFIG = """
webhooks = [{ source = "hooks", events = ["push"] }]
[flow]
key = "repository"
debounce = { period = "2s", timeout = "1m" }
throttle = { limit = 10, period = "1m" }
[budget]
daily = { tokens = 1000000 }
"""


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(count: int, window: float) -> tuple[int, float]:
    """(wake-ups, % of a core) of an idle scheduler of ``count`` such agents over ``window``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        project = OfflineProject(root, '[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n')
        for index in range(count):
            project.add_scripted_agent(f"agent-{index:04d}", CONFIG)
        log_path = Path(tmp) / "scheduler.log"  # outside the watched project folder
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "llamaherd", "--project", str(root), "start", "--port", "0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "AL_LOG_LEVEL": "WARNING"},
            )
        try:
            while not (root / ".al" / "scheduler.json").exists():
                if proc.poll() is not None:
                    raise SystemExit(f"scheduler exited: {log_path.read_text()}")
                time.sleep(0.1)
            settled(proc.pid, within=60)
            switches, cpu, began = thread_switches(proc.pid), cpu_seconds(proc.pid), time.time()
            time.sleep(window)
            woke = thread_switches(proc.pid) - switches
            share = 100 * (cpu_seconds(proc.pid) - cpu) / (time.time() - began)
            return woke, share
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    window = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    woke, share = measure(count, window)
    print(
        f"idle scheduler, {count} agents with debounce, throttle and a daily budget: "
        f"{woke} wake-ups and {share:.1f} % CPU in {window:g} s"
    )


if __name__ == "__main__":
    main()

"""Keeps ``al start`` running where systemd does not: ``python -m llamaherd_deploy.supervisor
CONFIG`` (``al service start`` launches it in its own session, detached from the terminal).

It does what the systemd unit asks of systemd: restart the scheduler when it fails (``Restart=
on-failure``, ``RestartSec=5``), give up after ``BURST`` failures within ``WINDOW`` seconds
(``StartLimitBurst``/``StartLimitIntervalSec``), and on SIGTERM pass the signal to the scheduler
only, which stops gracefully (its runs get the grace period; waiting runs keep their sandboxes)
and is waited for. A scheduler that exits 0 (``al stop``) is not restarted, and one that never
came up (a config error) is not retried: retrying cannot fix it.

One supervisor per project: it holds an exclusive lock on ``.al/supervisor.lock`` and writes its
pid to ``.al/supervisor.pid``; its own lines go to ``.al/scheduler.log`` with the scheduler's.
Each start reads ``.al/service.env`` (``KEY=VALUE`` lines), as the unit's ``EnvironmentFile=``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

RESTART_DELAY = 5.0
BURST = 5
WINDOW = 600.0


def log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} supervisor[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


class Supervisor:
    def __init__(self, config: dict[str, Any]):
        self.command: list[str] = config["command"]
        self.env = {**os.environ, **config.get("env", {})}
        self.env_file = Path(config["env_file"]) if config.get("env_file") else None
        self.cwd = config.get("cwd")
        self.state = Path(config["state"])
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None
        self.failures: deque[float] = deque()
        self.ever_up: set[int] = set()  # scheduler pids that came up

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def came_up(self, pid: int) -> bool:
        """Whether scheduler ``pid`` got as far as announcing itself in scheduler.json."""
        try:
            return json.loads((self.state / "scheduler.json").read_text()).get("pid") == pid
        except (OSError, ValueError):
            return False

    def run(self) -> int:
        while not self.stopping:
            env = {**self.env, **read_env_file(self.env_file)}  # re-read: it may have changed
            self.child = subprocess.Popen(self.command, env=env, cwd=self.cwd)
            log(f"started the scheduler: pid {self.child.pid}")
            code = self.wait(self.child)
            if self.stopping or code == 0:
                log(f"the scheduler stopped (exit {code})")
                return 0
            if self.child.pid not in self.ever_up:
                log(f"the scheduler exited {code} before it came up; not restarting it")
                return 1
            now = time.monotonic()
            self.failures.append(now)
            while self.failures and now - self.failures[0] > WINDOW:
                self.failures.popleft()
            if len(self.failures) >= BURST:
                log(f"the scheduler failed {BURST} times within {WINDOW:g} s; giving up")
                return 1
            log(f"the scheduler exited {code}; restarting it in {RESTART_DELAY:g} s")
            deadline = time.monotonic() + RESTART_DELAY
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(0.1)
        return 0

    def wait(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for ``child``, noting whether it came up (checked while it runs: it removes
        scheduler.json on a clean stop)."""
        while True:
            try:
                code = child.wait(0.5)
            except subprocess.TimeoutExpired:
                code = None
            if child.pid not in self.ever_up and self.came_up(child.pid):
                self.ever_up.add(child.pid)  # a crash leaves scheduler.json behind: seen here too
            if code is not None:
                return code


def read_env_file(path: Path | None) -> dict[str, str]:
    """``KEY=VALUE`` lines, as systemd's ``EnvironmentFile=`` reads them: blank lines and ``#``
    comments skipped, one pair of surrounding quotes removed."""
    values: dict[str, str] = {}
    try:
        lines = path.read_text().splitlines() if path else []
    except OSError:
        return values
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    state = Path(config["state"])
    lock = os.open(state / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log("another supervisor runs for this project; exiting")
        return 0
    supervisor = Supervisor(config)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pid_file = state / "supervisor.pid"
    pid_file.write_text(str(os.getpid()))
    try:
        return supervisor.run()
    finally:
        pid_file.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

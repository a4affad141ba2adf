"""Keeping track of every process a run started, so kill and pause reach all of them.

Processes that daemonise (``setsid`` plus a double fork) leave their process group and session,
so signalling a group is not enough. Two mechanisms, chosen per run:

- ``CgroupContainment`` (preferred): the run gets its own cgroup v2 directory
  (``<cgroup2 mount>/llamaherd/<run_id>``, on hybrid hosts the ``unified`` mount) and each exec a
  child cgroup in it. Children inherit the cgroup and an unprivileged process cannot leave it, so
  ``cgroup.kill`` ends all of them and ``cgroup.freeze`` stops all of them. Needs a writable
  cgroup2 mount (root, or a delegated subtree).
- ``ProcContainment`` (fallback): scans ``/proc`` for processes of the agent's uid whose initial
  environment carries ``AL_RUN_ID=<run_id>``; kill and pause signal each of them, repeating until
  no new one appears. A process that execs itself with a scrubbed environment escapes this.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_PARENT = "llamaherd"
SETTLE_TIMEOUT = 5.0  # seconds to wait for a kill or freeze to take effect
SCAN_ROUNDS = 50


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` or its ``unified`` dir)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields, _, tail = line.partition(" - ")
        if tail.split(" ", 1)[0] == "cgroup2":
            return Path(fields.split()[4])
    return None


def _wait(predicate, timeout: float = SETTLE_TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


class CgroupContainment:
    """One cgroup v2 directory per run, one child per exec."""

    kind = "cgroup"

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, relative: Path) -> CgroupContainment | None:
        """Make the run's cgroup at ``relative`` under ``CGROUP_PARENT``; None when there is no
        writable cgroup2 hierarchy."""
        mount = cgroup2_mount()
        if mount is None:
            return None
        path = mount / CGROUP_PARENT / relative
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        if not (path / "cgroup.freeze").exists():  # the root cgroup has no freezer
            return None
        return cls(path)

    def exists(self) -> bool:
        return self.path.is_dir()

    def _exec_dir(self, exec_id: str) -> Path:
        return self.path / exec_id

    def adopt(self, pid: int, exec_id: str) -> None:
        """Move a new exec's first process into its own child cgroup (before it runs anything)."""
        child = self._exec_dir(exec_id)
        child.mkdir(exist_ok=True)
        (child / "cgroup.procs").write_text(str(pid))

    def kill_exec(self, exec_id: str, pid: int) -> None:
        _kill_tree(self._exec_dir(exec_id))

    def exec_done(self, exec_id: str) -> None:
        # Succeeds only when nothing of the call is left; background processes keep it.
        with contextlib.suppress(OSError):
            self._exec_dir(exec_id).rmdir()

    def pids(self) -> list[int]:
        found: list[int] = []
        for procs in self.path.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                found.extend(int(line) for line in procs.read_text().split())
        return found

    def kill(self) -> None:
        _kill_tree(self.path)

    @property
    def paused(self) -> bool:
        try:
            return (self.path / "cgroup.freeze").read_text().strip() == "1"
        except OSError:
            return False

    def freeze(self) -> None:
        (self.path / "cgroup.freeze").write_text("1")
        _wait(lambda: _events(self.path).get("frozen") == "1")

    def thaw(self) -> None:
        (self.path / "cgroup.freeze").write_text("0")
        _wait(lambda: _events(self.path).get("frozen") == "0")

    def remove(self) -> None:
        """Kill what is left and remove the cgroup and its children."""
        if not self.exists():
            return
        self.kill()
        for parent, dirs, _files in os.walk(self.path, topdown=False):
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(parent, name))
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _events(path: Path) -> dict[str, str]:
    try:
        lines = (path / "cgroup.events").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(" ", 1) for line in lines if " " in line)


def _kill_tree(path: Path) -> None:
    """SIGKILL every process in a cgroup and its descendants, and wait until they are gone."""
    if not path.is_dir():
        return
    kill_file = path / "cgroup.kill"
    if kill_file.exists():
        kill_file.write_text("1")
    else:  # kernels before 5.14: freeze so nothing forks, then kill one by one
        (path / "cgroup.freeze").write_text("1")
        for procs in path.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                _signal(int(pid), signal.SIGKILL)
        (path / "cgroup.freeze").write_text("0")
    _wait(lambda: _events(path).get("populated") != "1")


class ProcContainment:
    """Fallback without cgroups: find the run's processes by uid and ``AL_RUN_ID`` in /proc."""

    kind = "proc"

    def __init__(self, uid: int, run_id: str):
        self.uid = uid
        self.marker = f"AL_RUN_ID={run_id}".encode()
        self._paused = False

    def exists(self) -> bool:
        return bool(self.pids())

    def adopt(self, pid: int, exec_id: str) -> None:
        """Nothing to do: the marker is in the exec's environment."""

    def kill_exec(self, exec_id: str, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def exec_done(self, exec_id: str) -> None:
        """Nothing to clean per exec."""

    def pids(self) -> list[int]:
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != self.uid:
                    continue
                with open(f"/proc/{entry.name}/environ", "rb") as fh:
                    if self.marker in fh.read().split(b"\0"):
                        found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or a zombie
        return found

    def _signal_all(self, sig: int) -> None:
        # Repeat: a process may fork between the scan and the signal.
        seen: set[int] = set()
        for _ in range(SCAN_ROUNDS):
            new = [pid for pid in self.pids() if pid not in seen or sig == signal.SIGKILL]
            if not new:
                return
            for pid in new:
                _signal(pid, sig)
            seen.update(new)
            if sig == signal.SIGKILL:
                time.sleep(0.005)

    def kill(self) -> None:
        self._signal_all(signal.SIGKILL)
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def freeze(self) -> None:
        self._signal_all(signal.SIGSTOP)
        self._paused = True

    def thaw(self) -> None:
        for pid in self.pids():
            _signal(pid, signal.SIGCONT)
        self._paused = False

    def remove(self) -> None:
        self.kill()

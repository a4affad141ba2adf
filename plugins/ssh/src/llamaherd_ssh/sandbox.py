"""One run's sandbox on a remote host: a private dir there, commands as sessions of the host's
multiplexed connection (see ``remote`` for the scripts and the layout)."""

from __future__ import annotations

import logging
import os
import secrets
import selectors
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from llamaherd.api import ExecOutput, ExecResult, SandboxError, SandboxLost, SshError, SshMaster
from llamaherd_ssh import remote

log = logging.getLogger("llamaherd.ssh")

TIMEOUT_EXIT = 124
KILLED_EXIT = 137  # the command's process group was killed (kill, interrupt, or by itself)
# After the command exited, how long to keep reading output still in flight from processes it
# left in the background (they may hold the session open for ever: read on in a thread).
DRAIN_GRACE = 0.1
# After a timeout kill, how long to wait for the session to end before leaving it to a thread.
KILL_GRACE = 5.0
FILE_TIMEOUT = 120.0
MAX_FILE = 64 * 1024 * 1024
_PUT = """umask 077
cd -- {workdir}
mkdir -p -- "$(dirname -- {path})"
cat >{path}
chmod {mode} {path}
"""
_GET = """cd -- {workdir}
exec head -c {limit} -- {path}
"""


class _Session:
    """What the wrapper of one exec said on the session's stderr."""

    def __init__(self) -> None:
        self.group: int | None = None
        self.exit: int | None = None
        self.errors: list[str] = []  # anything else: ssh's own messages
        self._partial = b""

    def feed(self, data: bytes) -> None:
        *lines, self._partial = (self._partial + data).split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").strip()
            kind, _, value = line.partition(" ")
            if kind == "al-pid" and value.isdigit():
                self.group = int(value)
            elif kind == "al-exit" and value.lstrip("-").isdigit():
                self.exit = int(value)
            elif line:
                self.errors = [*self.errors[-19:], line]


def _drain_in_background(proc: subprocess.Popen[bytes], fds: list[int]) -> None:
    """Read a session that processes left in the background still hold, until they end (closing
    it instead would kill them with SIGPIPE at their next write)."""

    def drain() -> None:
        try:
            with selectors.DefaultSelector() as selector:
                for fd in fds:
                    selector.register(fd, selectors.EVENT_READ)
                while selector.get_map():
                    for key, _ in selector.select():
                        if not os.read(key.fd, 65536):
                            selector.unregister(key.fd)
        finally:
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()

    threading.Thread(target=drain, name=f"al-ssh-drain-{proc.pid}", daemon=True).start()


class Leftovers:
    """Run dirs whose cleanup could not reach their host (it was lost mid-run), by host: each
    is removed, with what still runs of it, before the next run starts there. Without this a
    dir (and its copy of the run's credentials) stayed on the host while the same scheduler ran
    new runs there, until the next start's orphan sweep."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_host: dict[Any, dict[str, tuple[str, bool]]] = {}  # target -> dir -> (id, keep)

    def add(self, master: SshMaster, run_id: str, run_dir: str, keep_workdir: bool) -> None:
        with self._lock:
            self._by_host.setdefault(master.target, {})[run_dir] = (run_id, keep_workdir)
        log.warning(
            "run %s: its dir on %s stays until the host answers again (removed before the next "
            "run there)",
            run_id,
            master.target.label,
        )

    def remove(self, master: SshMaster) -> None:
        """Remove what lost runs left on ``master``'s host (those it cannot remove now are
        kept for the next time)."""
        with self._lock:
            pending = self._by_host.pop(master.target, {})
        for run_dir, (run_id, keep_workdir) in pending.items():
            try:
                master.script(remote.remove_script(f"AL_RUN_ID={run_id}", run_dir, keep_workdir))
            except SshError as exc:
                with self._lock:
                    self._by_host.setdefault(master.target, {})[run_dir] = (run_id, keep_workdir)
                log.warning(
                    "run %s: its dir on %s is still there: %s", run_id, master.target.label, exc
                )
                continue
            log.info("run %s: its dir left on %s is removed", run_id, master.target.label)


class SshSandbox:
    """A run's private dir on a host, and the sessions running its commands there."""

    def __init__(
        self,
        master: SshMaster,
        run_id: str,
        run_dir: str,
        env: dict[str, str],
        *,
        socket: str | None = None,
        keep_workdir: bool = False,
        release: Callable[[], None] | None = None,
        leftovers: Leftovers | None = None,
    ):
        self.master = master
        self.id = run_id
        self.run_dir = run_dir
        self.workdir = f"{run_dir}/work"
        self.env = env
        self.socket = socket
        self.keep_workdir = keep_workdir
        self._release = release
        self._leftovers = leftovers
        self._marker = f"AL_RUN_ID={run_id}"
        self._running: dict[str, int | None] = {}  # exec id -> its process group, once known
        self._lock = threading.Lock()
        self._cleaned = False

    def __repr__(self) -> str:
        return f"<SshSandbox {self.id} on {self.master.target.label}>"

    @property
    def host(self) -> str:
        return self.master.target.label

    # ------------------------------------------------------------------ exec
    def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        """Run ``/bin/sh -c command`` in the run's dir on the host, stdout and stderr merged and
        streamed by line. On ``timeout`` the command's process group (and whatever it started
        that left the group) is killed, exit 124. ``SandboxLost`` when the host went away."""
        if self._cleaned:
            raise SandboxError(f"sandbox {self.id} was cleaned up")
        started = time.monotonic()
        exec_id = secrets.token_hex(8)
        full_env = {**self.env, **(env or {}), "AL_RUN_ID": self.id, "AL_EXEC_ID": exec_id}
        script = remote.exec_script(
            command, self.workdir, cwd or self.workdir, f"{self.run_dir}/bin", full_env
        )
        try:
            proc = self.master.popen(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except SshError as exc:
            raise SandboxLost(str(exc)) from None
        output, session = ExecOutput(on_output), _Session()
        with self._lock:
            self._running[exec_id] = None
        try:
            deadline = None if timeout is None else started + timeout
            timed_out = self._pump(proc, output, session, exec_id, deadline)
        finally:
            with self._lock:
                self._running.pop(exec_id, None)
        output.feed(b"", final=True)
        duration = time.monotonic() - started
        if timed_out:
            return ExecResult(TIMEOUT_EXIT, output.text, True, duration)
        if session.exit is not None:
            return ExecResult(session.exit, output.text, False, duration)
        if not self.master.alive():
            why = session.errors[-1] if session.errors else "connection closed"
            raise SandboxLost(f"ssh {self.host}: connection lost during a command ({why})")
        return ExecResult(KILLED_EXIT, output.text, False, duration)

    def _pump(
        self,
        proc: subprocess.Popen[bytes],
        output: ExecOutput,
        session: _Session,
        exec_id: str,
        deadline: float | None,
    ) -> bool:
        """Read the session until it ends, or the command exited and its output settled;
        kill the command at ``deadline``. True when it timed out."""
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.fileno(), proc.stderr.fileno()
        open_fds = {out, err}
        grace: float | None = None
        timed_out = False
        with selectors.DefaultSelector() as selector:
            for fd in open_fds:
                selector.register(fd, selectors.EVENT_READ)
            while open_fds:
                now = time.monotonic()
                if session.exit is not None and grace is None:
                    grace = now + DRAIN_GRACE
                if grace is not None and now >= grace:
                    break
                if deadline is not None and now >= deadline and not timed_out:
                    timed_out = True
                    self._signal_exec(exec_id, session.group)
                    grace = now + KILL_GRACE
                limits = [t for t in (grace, None if timed_out else deadline) if t is not None]
                wait = max(0.0, min(limits) - now) if limits else None
                for key, _ in selector.select(wait):
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fd)
                        open_fds.discard(key.fd)
                    elif key.fd == out:
                        output.feed(data)
                    else:
                        session.feed(data)
                        if session.group is not None:
                            with self._lock:
                                if exec_id in self._running:
                                    self._running[exec_id] = session.group
        if open_fds:
            _drain_in_background(proc, sorted(open_fds))
        else:
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        return timed_out

    def _signal_exec(self, exec_id: str, group: int | None, sig: str = "KILL") -> None:
        groups = [] if group is None else [group]
        self._script(remote.signal_script(sig, f"AL_EXEC_ID={exec_id}", groups), quiet=True)

    def interrupt(self) -> None:
        """Kill the commands running now (each with what it started); the sandbox stays."""
        with self._lock:
            running = list(self._running.items())
        for exec_id, group in running:
            self._signal_exec(exec_id, group)

    # ------------------------------------------------------------------ files
    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file on the host (a relative path is under the working dir)."""
        script = _PUT.format(
            workdir=remote.q(self.workdir), path=remote.q(path), mode=f"{mode & 0o7777:o}"
        )
        self._file(script, path, data)

    def get_file(self, path: str) -> bytes:
        """Read a file (up to 64 MiB) on the host; a relative path is under the working dir."""
        script = _GET.format(
            workdir=remote.q(self.workdir), path=remote.q(path), limit=MAX_FILE + 1
        )
        data = self._file(script, path)
        if len(data) > MAX_FILE:
            raise OSError(f"{path}: larger than {MAX_FILE} bytes")
        return data

    def _file(self, script: str, path: str, data: bytes = b"") -> bytes:
        try:
            return self.master.script(script, data, timeout=FILE_TIMEOUT)
        except SshError as exc:
            if not self.master.alive():
                raise SandboxLost(str(exc)) from None
            reason = str(exc).rpartition(": ")[2]
            error: type[OSError] = OSError
            if "No such file" in reason:
                error = FileNotFoundError
            elif "Permission denied" in reason:
                error = PermissionError
            elif "Is a directory" in reason:
                error = IsADirectoryError
            raise error(f"{path}: {reason}") from None

    # ------------------------------------------------------------------ lifecycle
    def _script(self, script: str, quiet: bool = False) -> bytes:
        try:
            return self.master.script(script)
        except SshError as exc:
            if not quiet:
                raise
            log.warning("run %s: %s", self.id, exc)
            return b""

    def _groups(self) -> list[int]:
        with self._lock:
            return [group for group in self._running.values() if group is not None]

    def pause(self) -> None:
        """Stop every process of the run (SIGSTOP)."""
        self._script(remote.signal_script("STOP", self._marker, self._groups(), self.run_dir))

    def resume(self) -> None:
        self._script(remote.signal_script("CONT", self._marker, self._groups(), self.run_dir))

    def alive(self) -> bool:
        """Whether the run's dir is still on the host (False when the host cannot be reached)."""
        try:
            return self.master.script(f"test -d {remote.q(self.run_dir)} && echo yes") == b"yes\n"
        except SshError:
            return False

    def kill(self) -> None:
        """End every process of the run on the host; its files stay until cleanup. A host
        that cannot be reached is a warning: what runs there now is the orphan cleanup's."""
        groups = self._groups()
        self._script(remote.signal_script("KILL", self._marker, groups, self.run_dir), quiet=True)

    def cleanup(self) -> None:
        """Kill what is left, remove the run's dir (its work dir kept with ``keepWorkdir``),
        close the gateway forward and free the run's place on the host. A host that cannot be
        reached keeps the dir until it can (``Leftovers``)."""
        self._cleaned = True
        try:
            self.master.cancel(f"gateway:{self.id}")
            self._script(remote.remove_script(self._marker, self.run_dir, self.keep_workdir))
        except SshError:
            if self._leftovers is not None:
                self._leftovers.add(self.master, self.id, self.run_dir, self.keep_workdir)
            raise
        finally:
            if self._release is not None:
                self._release()

    def handle(self) -> dict[str, Any]:
        return {
            "runtime": "ssh",
            "run_id": self.id,
            "target": self.master.target.to_dict(),
            "run_dir": self.run_dir,
            "socket": self.socket,
            "keep_workdir": self.keep_workdir,
        }

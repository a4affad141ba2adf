"""A host-user sandbox: one run's processes, running as the agent's OS user."""

from __future__ import annotations

import os
import secrets
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from llamaherd.api import ExecOutput, ExecResult, SandboxError
from llamaherd_host_user import shared
from llamaherd_host_user.containment import CgroupContainment, ProcContainment
from llamaherd_host_user.identity import Identity
from llamaherd_host_user.layout import Layout

TIMEOUT_EXIT = 124
# How long to keep reading after the command exited, for output still in flight from processes
# it left in the background (they may hold the pipe open for ever).
DRAIN_GRACE = 0.1

# setuid and file-capability binaries (sudo, su, ping) give no extra privilege inside a run, as
# with the containers' no-new-privileges; util-linux's setpriv sets the flag.
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
NO_NEW_PRIVS = f"{_SETPRIV} --no-new-privs " if _SETPRIV else ""
# The exec's first process waits on stdin until the scheduler has put it into the run's cgroup,
# so nothing it forks can start outside. Then it drops stdin, enters the cwd as the agent user
# and becomes the command. $1 = command, $2 = cwd.
GATE = f'read -r _; exec </dev/null; cd -- "$2" || exit 1; exec {NO_NEW_PRIVS}/bin/sh -c "$1"'
FILE_TIMEOUT = 60.0
MAX_FILE = 64 * 1024 * 1024
PUT = 'umask 077; mkdir -p -- "$(dirname -- "$1")" && cat >"$1" && chmod "$2" "$1"'

Containment = CgroupContainment | ProcContainment


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _discard_in_background(fd: int) -> None:
    """Keep reading a pipe that processes left in the background still hold, until they close it.

    Closing it instead would kill them with SIGPIPE at their next write (a dev server started
    with ``&`` would die at its first log line).
    """

    def drain() -> None:
        try:
            while os.read(fd, 65536):
                pass
        finally:
            os.close(fd)

    threading.Thread(target=drain, name=f"al-drain-{fd}", daemon=True).start()


class HostUserSandbox:
    """Runs commands as ``identity`` in ``layout.workdir``; see the package README."""

    def __init__(
        self,
        layout: Layout,
        identity: Identity,
        containment: Containment,
        env: dict[str, str],
        keep_workdir: bool = False,
    ):
        self.layout = layout
        self.identity = identity
        self.containment = containment
        self.env = env
        self.keep_workdir = keep_workdir
        self.id = layout.run_id
        self.workdir = str(layout.workdir)
        self._cleaned = False
        self._running: dict[str, int] = {}  # exec id -> pid of the execs in progress
        self._running_lock = threading.Lock()

    # ------------------------------------------------------------------ exec
    def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        """Run ``/bin/sh -c command`` as the agent user, stdout and stderr merged.

        Each output line (without its newline) goes to ``on_output`` as it arrives. On
        ``timeout`` everything the call started is killed and the result is exit 124.
        """
        if self._cleaned:
            raise SandboxError(f"sandbox {self.id} was cleaned up")
        if self.containment.paused:
            raise SandboxError(f"sandbox {self.id} is paused; resume it first")
        started = time.monotonic()
        exec_id = "e" + secrets.token_hex(4)
        proc, out_r = self._spawn(command, cwd or self.workdir, env, exec_id)
        lines = ExecOutput(on_output)
        timed_out, eof = True, False
        with self._running_lock:
            self._running[exec_id] = proc.pid
        try:
            deadline = None if timeout is None else started + timeout
            timed_out, eof = self._pump(proc, out_r, lines, deadline)
        finally:
            with self._running_lock:
                self._running.pop(exec_id, None)
            if proc.poll() is None:
                self.containment.kill_exec(exec_id, proc.pid)
            proc.wait()
            self.containment.exec_done(exec_id)
            if eof:
                os.close(out_r)
            else:
                _discard_in_background(out_r)
        lines.feed(b"", final=True)
        code = TIMEOUT_EXIT if timed_out else _exit_code(proc.returncode)
        return ExecResult(code, lines.text, timed_out, time.monotonic() - started)

    def _spawn(
        self, command: str, cwd: str, env: dict[str, str] | None, exec_id: str
    ) -> tuple[subprocess.Popen[bytes], int]:
        full_env = {**self.env, **(env or {}), "AL_RUN_ID": self.id}
        gate_r, gate_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            argv, as_agent = self._argv(["/bin/sh", "-c", GATE, "al-exec", command, cwd])
            proc = subprocess.Popen(
                argv,
                stdin=gate_r,
                stdout=out_w,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,  # so a relative cwd is relative to the working dir
                env=full_env,
                start_new_session=True,
                **as_agent,
            )
        except OSError as exc:
            os.close(out_r)
            raise SandboxError(f"sandbox {self.id}: cannot start a process: {exc}") from None
        finally:
            os.close(gate_r)
            os.close(out_w)
        try:
            self.containment.adopt(proc.pid, exec_id)
        except OSError as exc:
            proc.kill()
            proc.wait()
            os.close(out_r)
            raise SandboxError(f"sandbox {self.id}: cannot contain the process: {exc}") from None
        finally:
            os.close(gate_w)  # opens the gate
        return proc, out_r

    @staticmethod
    def _pump(
        proc: subprocess.Popen[bytes], out_r: int, lines: ExecOutput, deadline: float | None
    ) -> tuple[bool, bool]:
        """Read output until the command exited and its output ended: (timed out, at EOF).

        Output still arriving after the exit is read for a short grace only: a process left in
        the background may hold the pipe open for ever.
        """
        pidfd = os.pidfd_open(proc.pid)
        eof = exited = False
        grace: float | None = None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(out_r, selectors.EVENT_READ, "out")
                selector.register(pidfd, selectors.EVENT_READ, "exit")
                while not (eof and exited):
                    now = time.monotonic()
                    if grace is not None and now >= grace:
                        break
                    if deadline is not None and now >= deadline:
                        return not exited, eof
                    limits = [t for t in (grace, deadline) if t is not None]
                    for key, _ in selector.select(min(limits) - now if limits else None):
                        if key.data == "exit":
                            exited = True
                            grace = time.monotonic() + DRAIN_GRACE
                            selector.unregister(pidfd)
                        elif data := os.read(out_r, 65536):
                            lines.feed(data)
                        else:
                            eof = True
                            selector.unregister(out_r)
        finally:
            os.close(pidfd)
        return False, eof

    def _argv(self, argv: list[str]) -> tuple[list[str], dict[str, Any]]:
        """How to start ``argv`` as the agent user: (argv, Popen's user arguments). With shared
        files it starts as root in a mount namespace showing them, and switches itself."""
        if shared.staged(self.layout):
            return shared.wrap(argv, self.layout, self.identity), {}
        return argv, self.identity.popen_kwargs()

    # ------------------------------------------------------------------ files
    def _as_agent(self, script: str, args: list[str], data: bytes = b"") -> bytes:
        """Run a tiny file operation as the agent user, so its permissions apply (not root's)."""
        argv, as_agent = self._argv(["/bin/sh", "-c", script, "al-file", *args])
        with subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.workdir,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,
            **as_agent,
        ) as proc:
            try:
                out, err = proc.communicate(data, timeout=FILE_TIMEOUT)
            except subprocess.TimeoutExpired:  # a FIFO, say, that nobody writes
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise TimeoutError(f"{args[0]}: no progress in {FILE_TIMEOUT} s") from None
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            reason = lines[-1] if lines else f"exit {proc.returncode}"
            error = OSError
            if "No such file" in reason:
                error = FileNotFoundError
            elif "Permission denied" in reason:
                error = PermissionError
            raise error(f"{args[0]}: {reason}")
        return out

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file as the agent user; a relative path is under the working dir."""
        self._as_agent(PUT, [path, format(mode & 0o7777, "o")], data)

    def get_file(self, path: str) -> bytes:
        """Read a file (up to 64 MiB) as the agent user; a relative path is under the working dir."""
        data = self._as_agent(f'exec head -c {MAX_FILE + 1} -- "$1"', [path])
        if len(data) > MAX_FILE:
            raise OSError(f"{path}: larger than {MAX_FILE} bytes")
        return data

    def interrupt(self) -> None:
        """Kill the commands running now (each with what it started); the sandbox stays. Their
        ``exec`` calls return as the processes end."""
        with self._running_lock:
            running = list(self._running.items())
        for exec_id, pid in running:
            self.containment.kill_exec(exec_id, pid)

    # ------------------------------------------------------------------ lifecycle
    def pause(self) -> None:
        """Stop every process of the run (cgroup freezer, or SIGSTOP to each)."""
        self.containment.freeze()

    def resume(self) -> None:
        self.containment.thaw()

    def alive(self) -> bool:
        """True until cleanup, and while any process of the run is left."""
        return self.layout.private.exists() or bool(self.containment.pids())

    def kill(self) -> None:
        """End every process of the run, daemons included; files stay until cleanup."""
        self.containment.kill()
        if self.containment.paused:
            self.containment.thaw()  # so later execs do not start frozen

    def cleanup(self) -> None:
        """Kill what is left, remove credentials and commands, and the working dir unless kept."""
        self.containment.remove()
        self.layout.remove(self.keep_workdir)
        self._cleaned = True

    def handle(self) -> dict[str, Any]:
        return {
            "runtime": "host-user",
            "run_id": self.id,
            "user": self.identity.name,
            "uid": self.identity.uid,
            "base": str(self.layout.base),
            "workdir": self.workdir,
            "credentials": str(self.layout.credentials),
            "cgroup": str(self.containment.path)
            if isinstance(self.containment, CgroupContainment)
            else None,
            "keep_workdir": self.keep_workdir,
        }

"""One run's container: commands through ``docker exec``, files, pause/resume, kill, cleanup.

The container itself only idles (PID 1 is a shell sleeping in a loop); every tool call is an exec
with the run's env, so secrets and the run token live in exec configs, never in the container's
own config (``docker inspect`` does not show them).
"""

from __future__ import annotations

import codecs
import errno
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from llamaherd.api import ExecResult, SandboxError
from llamaherd_docker.daemon import docker_errors

WORKDIR = "/tmp/work"
# Each exec carries a random value in this variable; a timeout kills exactly the processes that
# inherited it (the command, its children, anything it daemonised) and nothing else.
EXEC_MARKER = "AL_EXEC_ID"
TIMED_OUT_EXIT = 124
# After a timeout kill, how long the output stream may stay open before it is cut.
KILL_GRACE = 2.0
# How long to keep trying to start the kill exec (a fork bomb may hold every pid for a while).
KILL_RETRY_FOR = 1.0

KILL_SCRIPT = r"""for _ in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    case "$(tr '\0' '\n' <"$d/environ")" in
      *"$0=$1"*) kill -KILL "${d#/proc/}" 2>/dev/null && found=1 ;;
    esac
  done 2>/dev/null
  [ -n "$found" ] || break
done"""
# Runs the command with stderr on the stdout pipe, so output keeps the order it was written in
# (the daemon forwards two pipes independently) and line numbers in shell errors stay right.
MERGED_SHELL = ["/bin/sh", "-c", 'exec /bin/sh -c "$0" 2>&1']
# put_file: the data arrives on stdin.
WRITE_SCRIPT = 'cat >"$0" && chmod "$1" "$0"'


def _raw_socket(sock: Any) -> socket.socket:
    # The SDK hands back a SocketIO around the connection; half-closing and cancelling need the
    # socket itself (the SDK's own docs use ``_sock`` the same way).
    return getattr(sock, "_sock", sock)


def _shutdown(raw: socket.socket, done: threading.Event) -> None:
    """End a stream still open (its processes could not all be killed): the caller returns."""
    if not done.is_set():
        try:
            raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _os_error(path: str, stderr: str) -> OSError:
    """An OSError for a failed file operation, with the errno its message implies."""
    message = stderr.strip().splitlines()[-1] if stderr.strip() else "failed"
    code = errno.EIO
    if "No such file" in message:
        code = errno.ENOENT
    elif "ermission denied" in message or "Read-only" in message:
        code = errno.EACCES
    elif "Is a directory" in message:
        code = errno.EISDIR
    return OSError(code, message, path)


class ContainerSandbox:
    """A running container for one run (see the module docstring)."""

    workdir = WORKDIR

    def __init__(
        self, engine: Any, container_id: str, env: dict[str, str], credentials_dir: str | None
    ):
        self.engine = engine  # hosts.LocalEngine or hosts.RemoteEngine
        self._api = engine.client().api
        self.id = container_id
        self.env = env
        self.credentials_dir = credentials_dir
        self._running: set[str] = set()  # markers of the execs in progress (see interrupt)

    def __repr__(self) -> str:
        return f"<ContainerSandbox {self.id[:12]}>"

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        with docker_errors(f"container {self.id[:12]}: {what}"):
            yield

    # ------------------------------------------------------------------ exec

    def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        """Run ``command`` with ``/bin/sh -c`` as the image's user; stream its output.

        On ``timeout`` the command and every process it started are killed, and the result has
        ``timed_out=True`` and exit code 124.
        """
        marker = secrets.token_hex(12)
        started = time.monotonic()
        with self._errors("exec"):
            exec_id = self._api.exec_create(
                self.id,
                [*MERGED_SHELL, command],
                workdir=cwd or self.workdir,
                environment={**self.env, **(env or {}), EXEC_MARKER: marker},
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
        raw = _raw_socket(sock)
        raw.settimeout(None)  # a quiet command is not an error; timeouts are ours to enforce
        done = threading.Event()
        expired = threading.Event()
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, self._expire, (marker, raw, done, expired))
            timer.daemon = True
            timer.start()
        self._running.add(marker)
        try:
            output = self._read(sock, on_output)
        finally:
            self._running.discard(marker)
            done.set()
            if timer is not None:
                timer.cancel()
            sock.close()
        code = TIMED_OUT_EXIT if expired.is_set() else self._exit_code(exec_id)
        return ExecResult(code, output, expired.is_set(), time.monotonic() - started)

    @staticmethod
    def _read(sock: Any, on_output: Callable[[str], None] | None) -> str:
        from docker.utils.socket import frames_iter

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        parts: list[str] = []
        try:
            for _stream, chunk in frames_iter(sock, tty=False):
                text = decoder.decode(chunk)
                if text:
                    parts.append(text)
                    if on_output:
                        on_output(text)
        except OSError:
            pass  # the stream was cut after a timeout
        parts.append(decoder.decode(b"", final=True))
        return "".join(parts)

    def _exit_code(self, exec_id: str) -> int:
        # The stream ends when the last process holding stdout exits; the daemon records the exit
        # code a moment later.
        with self._errors("exec"):
            for _ in range(200):
                info = self._api.exec_inspect(exec_id)
                if not info["Running"] and info["ExitCode"] is not None:
                    return int(info["ExitCode"])
                time.sleep(0.005)
        return -1

    def _expire(
        self, marker: str, raw: socket.socket, done: threading.Event, expired: threading.Event
    ) -> None:
        """Timer thread: kill the exec's processes; cut the stream if it outlives the grace."""
        expired.set()
        cut = threading.Timer(KILL_GRACE, _shutdown, (raw, done))
        cut.daemon = True
        cut.start()
        self._kill_marked(marker)

    def interrupt(self) -> None:
        """Kill the commands running now (each with what it started); the container stays."""
        for marker in list(self._running):
            self._kill_marked(marker)

    def _kill_marked(self, marker: str) -> None:
        deadline = time.monotonic() + KILL_RETRY_FOR
        while True:
            try:
                self._run(["/bin/sh", "-c", KILL_SCRIPT, EXEC_MARKER, marker], workdir="/")
                return
            except SandboxError:
                # No pid left to start the kill with: the pids limit contains the command, the
                # stream is cut after KILL_GRACE and the run's kill ends the rest.
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)

    def _run(self, argv: list[str], workdir: str = WORKDIR) -> tuple[int, bytes, bytes]:
        """A short internal exec: (exit code, stdout, stderr). SandboxError if it cannot start."""
        with self._errors("exec"):
            exec_id = self._api.exec_create(self.id, argv, workdir=workdir, environment=self.env)
            stdout, stderr = self._api.exec_start(exec_id["Id"], demux=True)
        code = self._exit_code(exec_id["Id"])
        if code == 126 and b"OCI runtime" in (stdout or b""):
            raise SandboxError(f"container {self.id[:12]}: {stdout.decode(errors='replace')}")
        return code, stdout or b"", stderr or b""

    # ------------------------------------------------------------------ files

    def _absolute(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir}/{path}"

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` (relative to the working dir) as the image's user.

        Through an exec's stdin: the Docker archive API cannot write into tmpfs mounts, and the
        root fs is read-only.
        """
        path = self._absolute(path)
        with self._errors("put_file"):
            exec_id = self._api.exec_create(
                self.id,
                ["/bin/sh", "-c", WRITE_SCRIPT, path, f"{mode:o}"],
                stdin=True,
                workdir="/",
                environment=self.env,
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
        raw = _raw_socket(sock)
        try:
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)
            stderr = self._read(sock, None)
        finally:
            sock.close()
        if self._exit_code(exec_id) != 0:
            raise _os_error(path, stderr)

    def get_file(self, path: str) -> bytes:
        """The bytes of ``path`` (relative to the working dir); OSError when unreadable."""
        path = self._absolute(path)
        code, stdout, stderr = self._run(["cat", "--", path], workdir="/")
        if code != 0:
            raise _os_error(path, stderr.decode(errors="replace"))
        return stdout

    # ------------------------------------------------------------------ lifecycle

    def pause(self) -> None:
        """Freeze every process (``docker pause``) while the run waits."""
        with self._errors("pause"):
            self._api.pause(self.id)

    def resume(self) -> None:
        with self._errors("resume"):
            if self._state().get("Paused"):
                self._api.unpause(self.id)

    def alive(self) -> bool:
        """True while the container runs (paused counts: it can be resumed)."""
        try:
            return bool(self._state().get("Running"))
        except SandboxError:
            return False

    def _state(self) -> dict[str, Any]:
        with self._errors("inspect"):
            return self._api.inspect_container(self.id)["State"]

    def kill(self) -> None:
        """SIGKILL every process of the run at once (the container's whole cgroup)."""
        from docker.errors import APIError

        with self._errors("kill"):
            try:
                self._api.kill(self.id)
            except APIError as exc:
                if exc.status_code not in (404, 409):  # gone, or not running: already dead
                    raise

    def cleanup(self) -> None:
        """Remove the container (even if still running) and the host's staged credentials."""
        remove(self.engine, self.id, self.credentials_dir)

    def handle(self) -> dict[str, Any]:
        return {
            "container": self.id,
            "credentials_dir": self.credentials_dir,
            **self.engine.handle(),
        }


def remove(engine: Any, container_id: str, credentials_dir: str | None) -> None:
    """Force-remove a container (a missing one is fine) and the run's staged files on the
    engine's host."""
    from docker.errors import APIError, NotFound

    try:
        with docker_errors(f"container {container_id[:12]}: remove"):
            try:
                engine.client().api.remove_container(container_id, force=True)
            except NotFound:
                pass
            except APIError as exc:
                if "already in progress" not in str(exc.explanation):
                    raise
    finally:
        engine.unstage(credentials_dir)

"""One SSH connection to an environment's server, through the system's OpenSSH client.

Why OpenSSH (``ssh``) and not a Python SSH library (paramiko, asyncssh):

- It is the client the user already trusts and has configured: ``~/.ssh/config`` (``Host``
  aliases, ``ProxyJump``, ``Match``), ``known_hosts``, the agent, hardware keys and
  certificates all work exactly as they do for ``ssh host``. paramiko reads only part of
  ``ssh_config`` (no ``ProxyJump``, no ``Match exec``); asyncssh re-implements the lot.
- Multiplexing (``ControlMaster``): one authentication per command, then every step of a push is
  a cheap session over the same connection.
- Tunnelling the control API without opening a port: ``ssh -O forward -L /local.sock:127.0.0.1:PORT``
  forwards a unix socket on this machine, in a 0700 directory so only this user can reach it, to
  the scheduler's loopback address on the server. Nothing listens on the network at either end.
  paramiko has no unix-socket forwarding at all.
- No dependency: the plugin needs nothing beyond core, and no C extension to build.

File transfer does not use ``scp`` or ``rsync`` (often missing on a fresh server): a push streams
one tar archive over the session's stdin to a small standard-library helper run by the remote
``python3`` (``llamaherd_deploy.helper``), which is needed there anyway.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

from llamaherd.api import CommandFailed
from llamaherd_deploy.environments import Environment

CONNECT_TIMEOUT = 20  # seconds, for TCP connect plus authentication
# Reads the helper's source (its length, then the bytes) and runs it; the request follows on
# stdin. No single quote inside: it is sent single-quoted, which every common login shell
# (sh, bash, zsh, fish) passes through unchanged.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.buffer.readline());"
    'exec(compile(sys.stdin.buffer.read(n),"llamaherd-deploy-helper","exec"),'
    '{"__name__":"__main__"})'
)


def helper_source() -> bytes:
    return files("llamaherd_deploy").joinpath("helper.py").read_bytes()


class Connection:
    """An OpenSSH ControlMaster to ``env``'s host: ``run`` commands, ``call`` the helper,
    ``forward`` a local unix socket. Use as a context manager (``close`` ends the master)."""

    def __init__(self, env: Environment):
        if shutil.which("ssh") is None:
            raise CommandFailed(
                "the ssh command is not installed (llamaherd-deploy uses OpenSSH: "
                "apt-get install openssh-client)"
            )
        if env.pending:
            raise CommandFailed(
                f"environment {env.name}: its server has no address yet (`al env prov` did not "
                f"finish): `al env deprov {env.name}` deletes what was made"
            )
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="al-ssh-")  # 0700: the control and forward sockets
        self.control = os.path.join(self.dir, "master")
        self.master: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ connection
    def args(self, *extra: str) -> list[str]:
        """``ssh`` with the environment's options and our control socket, ending with ``--``:
        what follows (the host, then the remote command) is never read as an option."""
        env = self.env
        args = ["ssh"]
        # ssh keeps the first value it gets for an option: the user's own options win.
        for option in env.ssh_options:
            args += ["-o", option]
        args += [
            "-o", "BatchMode=yes",  # never prompt: a push runs unattended
            "-o", "StrictHostKeyChecking=accept-new",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
            "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4",
            "-o", f"ControlPath={self.control}",
            "-p", str(env.port),
            "-l", env.user,
        ]  # fmt: skip
        if env.key:
            args += ["-i", str(Path(env.key).expanduser()), "-o", "IdentitiesOnly=yes"]
        return [*args, *extra, "--"]

    def open(self) -> Connection:
        """Authenticate once; later commands reuse the connection."""
        command = self.args("-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-N")
        self.master = subprocess.Popen(
            [*command, self.env.host],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + CONNECT_TIMEOUT + 10
        while not os.path.exists(self.control):
            if self.master.poll() is not None:
                error = (
                    self.master.stderr.read().decode(errors="replace") if self.master.stderr else ""
                )
                self.close()
                raise CommandFailed(f"ssh {self.env.user}@{self.env.host}: {_last_line(error)}")
            if time.monotonic() > deadline:
                self.close()
                raise CommandFailed(
                    f"ssh {self.env.user}@{self.env.host}: no connection after "
                    f"{CONNECT_TIMEOUT + 10} s"
                )
            time.sleep(0.02)
        return self

    def close(self) -> None:
        if self.master is not None:
            if self.master.poll() is None:
                subprocess.run(
                    [*self.args("-O", "exit"), self.env.host], capture_output=True, timeout=10
                )
                try:
                    self.master.wait(5)
                except subprocess.TimeoutExpired:
                    self.master.kill()
                    self.master.wait()
            if self.master.stderr:
                self.master.stderr.close()
            self.master = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Connection:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands
    def run(
        self, command: str, *, input: bytes | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[bytes]:
        """Run a shell command on the server; its output is returned, not printed."""
        return subprocess.run(
            [*self.args(), self.env.host, command],
            input=input,
            capture_output=True,
            timeout=timeout,
        )

    def forward(self, local_socket: str, remote_host: str, remote_port: int) -> None:
        """Forward ``local_socket`` (created now, on this machine) to ``remote_host:port`` as
        seen from the server."""
        result = subprocess.run(
            [
                *self.args("-O", "forward", "-L", f"{local_socket}:{remote_host}:{remote_port}"),
                self.env.host,
            ],
            capture_output=True,
            timeout=30,
        )
        if result.returncode != 0:
            raise CommandFailed(
                f"ssh {self.env.user}@{self.env.host}: cannot forward to {remote_host}:"
                f"{remote_port}: {_last_line(result.stderr.decode(errors='replace'))}"
            )

    def call(
        self,
        op: str,
        request: dict[str, Any],
        *,
        payload: Callable[[IO[bytes]], None] | None = None,
        progress: Callable[[str], None] | None = None,
        timeout: float = 600,
    ) -> dict[str, Any]:
        """Run the helper's ``op`` on the server with ``request``; ``payload(stream)`` writes
        what follows the request on its stdin (a tar archive). The helper's progress lines go
        to ``progress``; its JSON answer is returned, its error raised as one line."""
        source = helper_source()
        command = f"{shlex.quote(self.env.python)} -c '{BOOTSTRAP}'"
        with self._process(command, progress) as (proc, stderr_tail):
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(b"%d\n" % len(source) + source)
                proc.stdin.write(json.dumps({"op": op, **request}).encode() + b"\n")
                if payload is not None:
                    payload(proc.stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the helper failed early: its answer says why
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                out = proc.stdout.read()
                proc.wait()
            finally:
                timer.cancel()
            if proc.returncode == -9:
                raise CommandFailed(
                    f"{self.env.where}: step {op!r} did not finish within {timeout:g} s"
                )
        return self._answer(op, proc.returncode, out, stderr_tail)

    def stream(self, op: str, request: dict[str, Any], echo: Callable[[str], None]) -> int:
        """Run the helper's ``op``, which becomes a command whose output lines go to ``echo``
        as they come (``logs``); its exit status. The helper's own refusal is raised."""
        source = helper_source()
        command = f"{shlex.quote(self.env.python)} -c '{BOOTSTRAP}'"
        proc = subprocess.Popen(
            [*self.args(), self.env.host, command], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b"%d\n" % len(source) + source)
            proc.stdin.write(json.dumps({"op": op, **request}).encode() + b"\n")
            proc.stdin.close()
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                refusal = _refusal(line)
                if refusal is not None:
                    raise CommandFailed(f"{self.env.where}: {refusal}")
                echo(line)
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    @contextmanager
    def _process(
        self, command: str, progress: Callable[[str], None] | None
    ) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
        proc = subprocess.Popen(
            [*self.args(), self.env.host, command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        tail: list[str] = []
        relay = threading.Thread(target=_relay, args=(proc.stderr, progress, tail), daemon=True)
        relay.start()
        try:
            yield proc, tail
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            relay.join(10)

    def _answer(self, op: str, code: int, out: bytes, tail: list[str]) -> dict[str, Any]:
        lines = out.decode(errors="replace").strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
        if isinstance(answer, dict) and "error" in answer:
            raise CommandFailed(f"{self.env.where}: {answer['error']}")
        if code == 127 and not lines:
            raise CommandFailed(
                f"{self.env.where}: {self.env.python!r} not found on the server (install "
                "Python 3.11 or later, or set the environment's python)"
            )
        if code != 0 or not isinstance(answer, dict):
            detail = _last_line("\n".join(tail)) or f"exit status {code}"
            raise CommandFailed(f"{self.env.where}: step {op!r} failed: {detail}")
        return answer


def _relay(
    stream: IO[bytes] | None, progress: Callable[[str], None] | None, tail: list[str]
) -> None:
    """Pass the helper's stderr on line by line, keeping the last lines for an error."""
    if stream is None:
        return
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        tail.append(line)
        del tail[:-20]
        if progress is not None and line:
            progress(line)


def _refusal(line: str) -> str | None:
    """The helper's error answer (``{"error": ...}``), when ``line`` is one."""
    if not line.startswith('{"error"'):
        return None
    try:
        return str(json.loads(line)["error"])
    except (ValueError, KeyError, TypeError):
        return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "connection failed"

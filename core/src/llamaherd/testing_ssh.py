"""Real OpenSSH for tests: ``sshd`` on a free loopback port, throwaway OS users it lets in.

Part of ``llamaherd.testing`` (its fixtures are registered with it). Needs root (sshd and
``useradd``) and Debian's ``openssh-server``; without them the tests using these fixtures skip,
naming what is missing, except under ``AL_REQUIRE_SERVICES=1`` (CI), where they fail
(:mod:`llamaherd.testing_services`).

- ``ssh_server()`` starts an ``sshd`` (its own config and host key, key authentication only,
  no PAM) and returns an :class:`Sshd`: ``port``, ``known_hosts`` (a file holding just its host
  key), ``stop()`` (the host goes down: the listener and every session it serves are killed);
  each is stopped at teardown. ``sshd`` is one such server.
- ``gateway_stub``: a unix socket standing in for the scheduler's gateway, to forward to a
  remote run (``.path``; it answers ``pong`` to each connection and keeps what it got in
  ``.received``).
- ``ssh_user(server, groups=())`` creates an OS user with a home and a fresh key that
  ``server`` lets in, and returns an :class:`SshUser` (``name``, ``uid``, ``home``, ``key``,
  ``processes()``, ``files()``, ``runtime()``: the ``[runtime]`` keys that reach it); its
  processes are killed and it is removed at teardown.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing_services import require_service, sshd_path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _require_root() -> None:
    require_service("root")
    require_service("sshd")


@dataclass
class Sshd:
    """A running sshd on 127.0.0.1:``port``."""

    port: int
    home: Path  # its config, host key, authorized keys (``keys/<user>``)
    known_hosts: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def authorize(self, user: str, public_key: str) -> None:
        path = self.home / "keys" / user
        path.write_text(public_key)
        path.chmod(0o644)

    def start(self) -> None:
        """Start (again, after ``stop``) on the same port with the same host key."""
        self.proc = subprocess.Popen(
            [str(sshd_path()), "-D", "-e", "-f", str(self.home / "sshd_config")],
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                error = self.proc.stderr.read().decode() if self.proc.stderr else ""
                self.stop()
                pytest.fail(f"sshd did not start: {error}")
            time.sleep(0.02)

    def stop(self) -> None:
        """The host goes down: the listener and every session it serves are killed at once."""
        if self.proc is None:
            return
        for pid in [*_children(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None


def _start_sshd() -> Sshd:
    # sshd reads a user's authorized keys as that user: outside pytest's 0700 temp tree.
    home = Path(tempfile.mkdtemp(prefix="al-sshd-"))
    (home / "keys").mkdir()
    for directory in (home, home / "keys"):
        directory.chmod(0o755)
    key = home / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    port = free_port()
    (home / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {key}\nPidFile {home / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {home / 'keys'}/%u\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin no\n"
        "AllowTcpForwarding yes\nAllowStreamLocalForwarding yes\nMaxSessions 64\n"
        "LogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    known = home / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(home / 'host_key.pub').read_text()}")
    server = Sshd(port, home, known)
    server.start()
    return server


@pytest.fixture
def ssh_server() -> Iterator[Callable[[], Sshd]]:
    """``ssh_server()``: a new :class:`Sshd`; all are stopped (and removed) at teardown."""
    _require_root()
    started: list[Sshd] = []

    def start() -> Sshd:
        started.append(_start_sshd())
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.stop()
            shutil.rmtree(server.home, ignore_errors=True)


@pytest.fixture
def sshd(ssh_server: Callable[[], Sshd]) -> Sshd:
    """One running :class:`Sshd`."""
    return ssh_server()


@dataclass
class SshUser:
    """An OS user that an sshd lets in with ``key``."""

    name: str
    uid: int
    home: Path
    key: Path  # the private key that logs in as this user
    server: Sshd

    def processes(self) -> list[int]:
        """Pids of every process this user runs."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == self.uid:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        return pids

    def kill_processes(self) -> None:
        """SIGKILL every process of this user and wait (10 s at most) until none is left."""
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.05)

    def ps(self) -> str:
        """``ps`` of this user's processes (command lines), as the remote side sees them."""
        done = subprocess.run(
            ["ps", "-u", str(self.uid), "-o", "pid=,pgid=,args="], capture_output=True, text=True
        )
        return done.stdout

    def files(self, under: str = "") -> list[str]:
        """Paths (relative to its home) of the files and dirs under ``home/under``."""
        found = []
        # os.walk skips what vanishes while it looks (a run's dir being removed right now).
        for folder, dirs, names in os.walk(self.home / under):
            here = Path(folder).relative_to(self.home)
            found += [str(here / name) for name in (*dirs, *names)]
        return sorted(found)

    def runtime(self, **extra: Any) -> dict[str, Any]:
        """The ``[runtime] type = "ssh"`` keys that reach this user through its server."""
        return {
            "type": "ssh",
            "host": "127.0.0.1",
            "port": self.server.port,
            "user": self.name,
            "key_path": str(self.key),
            "ssh_options": {"UserKnownHostsFile": str(self.server.known_hosts)},
            **extra,
        }


@pytest.fixture
def ssh_user(tmp_path: Path) -> Iterator[Callable[..., SshUser]]:
    """``ssh_user(server, groups=())``: a new :class:`SshUser` of ``server``; each is removed
    (its processes killed first) at teardown."""
    _require_root()
    made: list[SshUser] = []

    def make(server: Sshd, groups: tuple[str, ...] = ()) -> SshUser:
        name = f"al-ssh-{secrets.token_hex(3)}"
        command = ["useradd", "--create-home", "--shell", "/bin/sh", name]
        if groups:
            command[1:1] = ["--groups", ",".join(groups)]
        subprocess.run(command, check=True)
        subprocess.run(["usermod", "-p", "*", name], check=True)  # no password, not locked
        key = tmp_path / f"{name}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        server.authorize(name, key.with_suffix(".pub").read_text())
        entry = pwd.getpwnam(name)
        made.append(SshUser(name, entry.pw_uid, Path(entry.pw_dir), key, server))
        return made[-1]

    try:
        yield make
    finally:
        for user in made:
            user.kill_processes()
            subprocess.run(["userdel", "--remove", user.name], capture_output=True)


@dataclass
class GatewayStub:
    path: str
    received: list[bytes] = field(default_factory=list)


@pytest.fixture
def gateway_stub() -> Iterator[GatewayStub]:
    """A unix socket in a fresh 0755 dir under /tmp (sandbox users must reach it) that
    answers ``pong`` to each connection after reading its first chunk."""
    directory = tempfile.mkdtemp(prefix="al-gw-stub-")
    os.chmod(directory, 0o755)
    stub = GatewayStub(os.path.join(directory, "gateway.sock"))
    server = socket.socket(socket.AF_UNIX)
    server.bind(stub.path)
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                stub.received.append(conn.recv(1024))
                conn.sendall(b"pong")

    threading.Thread(target=serve, name="gateway-stub", daemon=True).start()
    try:
        yield stub
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)

"""Fixtures of the deploy tests: a real OpenSSH server on 127.0.0.1, a throwaway OS user that
is the "server's" account, a wheelhouse built from this checkout, and ``deploy_al`` running
``al`` with isolated environment and credential stores."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from llamaherd.testing import wait_until

sys.path.insert(0, str(Path(__file__).parent))
import wheelhouse  # noqa: E402

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Sshd:
    port: int
    known_hosts: Path
    keys_dir: Path  # AuthorizedKeysFile %u: one file per user

    def authorize(self, user: str, public_key: str) -> None:
        path = self.keys_dir / user
        path.write_text(public_key)
        path.chmod(0o644)


@pytest.fixture
def sshd() -> Iterator[Sshd]:
    """Debian's sshd on a free loopback port, with its own config and host key (key
    authentication only, no PAM); stopped at teardown."""
    if os.geteuid() != 0 or not SSHD.exists():
        message = "needs root and openssh-server (apt-get install openssh-server)"
        if os.environ.get("CI"):  # .ci/run installs it: never skip these silently there
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # sshd reads a user's authorized keys as that user: outside pytest's 0700 temp tree.
    home = Path(tempfile.mkdtemp(prefix="al-sshd-"))
    keys = home / "keys"
    keys.mkdir()
    for directory in (home, keys):
        directory.chmod(0o755)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "host_key")], check=True
    )
    port = free_port()
    config = home / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {home / 'host_key'}\n"
        f"PidFile {home / 'sshd.pid'}\nAuthorizedKeysFile {keys}/%u\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin no\nAllowTcpForwarding yes\nLogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    known = home / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(home / 'host_key.pub').read_text()}")
    try:
        wait_until(lambda: _listening(port) or proc.poll() is not None, 10, what="sshd up")
        if proc.poll() is not None:
            pytest.fail(f"sshd exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        yield Sshd(port, known, keys)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(home, ignore_errors=True)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class RemoteUser:
    name: str
    uid: int
    home: Path
    key: Path  # the private key that logs in as this user

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


@pytest.fixture
def remote_user(sshd: Sshd, tmp_path: Path) -> Iterator[RemoteUser]:
    """A throwaway OS user with a home, which ``sshd`` lets in with a fresh key; its processes
    are ended and the user removed at teardown."""
    name = f"al-push-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "-p", "*", name], check=True)  # no password, but not locked
    key = tmp_path / "client_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    sshd.authorize(name, (tmp_path / "client_key.pub").read_text())
    entry = pwd.getpwnam(name)
    user = RemoteUser(name, entry.pw_uid, Path(entry.pw_dir), key)
    try:
        yield user
    finally:
        for pid in user.processes():  # only this throwaway user's: the scheduler we deployed
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_until(lambda: not user.processes(), 10, what="the user's processes gone")
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(f"/tmp/al-runs-{user.uid}", ignore_errors=True)


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of llamaherd, every first-party plugin and all their dependencies: what a server
    without a package index installs from (``al push --wheels``)."""
    from importlib import metadata

    wanted = ["llamaherd"] + sorted(
        d.metadata["Name"]
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").startswith("llamaherd-") and wheelhouse.local_source(d)
    )
    return wheelhouse.build(tmp_path_factory.mktemp("wheels"), wanted)


@pytest.fixture
def deploy_al(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``deploy_al(*args, cwd=..., timeout=..., extra={VAR: value})``: this environment's ``al``
    with environments and credentials kept under ``tmp_path`` (``envs``, ``creds``)."""
    env = {
        **os.environ,
        "AL_ENVIRONMENTS_DIR": str(tmp_path / "envs"),
        "AL_CREDENTIALS_DIR": str(tmp_path / "creds"),
    }
    env.pop("AL_ENV", None)

    def run(
        *args: str,
        cwd: Path | None = None,
        timeout: float = 120,
        extra: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "llamaherd", *args],
            cwd=cwd or tmp_path,
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run

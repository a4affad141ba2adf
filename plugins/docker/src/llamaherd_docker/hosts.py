"""Where containers run: this machine's Docker engine, or another host's reached over SSH.

An agent's ``[runtime] host = "ssh://user@host[:port]"`` (with ``key_path`` and ``ssh_options``
as for the ``ssh`` runtime) puts its containers on that host's engine. The connection is one
OpenSSH master (``llamaherd.api.SshMaster``) carrying everything:

- the engine's API: a unix socket of ours (in a 0700 dir) forwarded to the host's
  ``/var/run/docker.sock``, so the SDK talks plain HTTP to it, images are built there from the
  agent's (and the project's) Dockerfile, and nothing but sshd listens on the host;
- a run's files: its credentials and the language-skill commands are staged in a private
  (0700) dir on the host, mounted read-only into the container exactly as local ones are;
- the gateway: the scheduler's unix socket forwarded into that dir, mounted like the local one.

The container gets the same hardening wherever it runs (``runtime.Limits``). The remote user
needs access to the engine's socket (the ``docker`` group), which is root on that host in all
but name: give it a host of its own.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import (
    ConfigError,
    SandboxError,
    SandboxSpec,
    SshError,
    SshMasters,
    SshTarget,
    StagedFile,
    tar_archive,
)
from llamaherd_docker.daemon import POOL_SIZE, connect, docker_host

REMOTE_SOCKET = "/var/run/docker.sock"
SSH_URL = re.compile(
    r"ssh://(?:(?P<user>[^@/]+)@)?(?P<host>\[[^\]/]+\]|[^:/@\[\]]+)(?::(?P<port>\d+))?/?"
)


@dataclass
class Staged:
    """A run's files on the engine's host: ``private`` is removed with the run; the others are
    mounted (``credentials`` at /credentials, ``bin`` at /app/bin, ``gateway``'s dir at
    /run/al-gateway, ``shared`` at /app/static/shared)."""

    private: str
    credentials: str
    bin: str
    gateway: str | None
    shared: str | None = None


def _archive(spec: SandboxSpec) -> bytes:
    """``credentials/`` and ``shared/`` (readable by any uid through the read-only mounts: the
    image's user, whatever it is, must read them), ``bin/`` (the commands) and ``gw/`` (the
    gateway's socket), as a tar archive."""
    bin_dir = spec.bin_dir
    entries: list[tuple[str, int, bytes | None]] = [
        (directory, 0o755, None) for directory in ("credentials", "bin", "gw", "shared")
    ]
    entries += [(f"credentials/{f.path}", 0o444, f.content) for f in spec.credential_files]
    entries += [(f"shared/{f.path}", 0o444, f.content) for f in spec.shared_files]
    if bin_dir is not None and bin_dir.is_dir():
        entries += [
            (f"bin/{path.name}", 0o755, path.read_bytes())
            for path in sorted(bin_dir.iterdir())
            if path.is_file()
        ]
    return tar_archive(entries, parents=0o755)


def stage_files(run_id: str, credentials: list[StagedFile], shared: list[StagedFile]) -> Path:
    """Write only the run's credential files (``<type>/<instance>/<field>``) and the project's
    ``shared/`` files to a fresh host dir.

    Returns the private parent dir (0700, so no other host user can reach the files); its
    ``credentials`` and ``shared`` subdirs are what gets mounted. Inside them everything is
    world-readable because the image's user, whatever its uid, must read them through the
    read-only binds (so the credential types' own file modes do not apply here).
    """
    safe_run = re.sub(r"[^A-Za-z0-9_.-]", "-", run_id)
    private = Path(tempfile.mkdtemp(prefix=f"al-docker-{safe_run}-"))
    try:
        _write_tree(private / "credentials", credentials)
        if shared:
            _write_tree(private / "shared", shared)
    except BaseException:
        shutil.rmtree(private, ignore_errors=True)
        raise
    return private


def _write_tree(root: Path, files: list[StagedFile]) -> None:
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    for staged in files:
        target = root / staged.path
        for directory in reversed(target.relative_to(root).parents[:-1]):
            (root / directory).mkdir(mode=0o755, exist_ok=True)
            (root / directory).chmod(0o755)
        target.write_bytes(staged.content)
        target.chmod(0o444)


class LocalEngine:
    """The Docker engine of this machine (``DOCKER_HOST`` or the default socket)."""

    name = "local"

    def __init__(self) -> None:
        self._client: Any = None

    @property
    def where(self) -> str:
        return docker_host()

    def client(self) -> Any:
        if self._client is None:
            self._client = connect()
        return self._client

    def unchecked(self) -> str | None:
        """Why a check of the configuration does not connect (never, here)."""
        return None

    def option_warnings(self) -> list[str]:
        return []

    def handle(self) -> dict[str, Any]:
        return {}

    def stage(self, spec: SandboxSpec) -> Staged:
        private = str(stage_files(spec.run_id, spec.credential_files, spec.shared_files))
        gateway = os.path.dirname(spec.gateway_socket) if spec.gateway_socket else None
        shared = f"{private}/shared" if spec.shared_files else None
        return Staged(private, f"{private}/credentials", str(spec.bin_dir), gateway, shared)

    def unstage(self, private: str | None) -> None:
        if private:
            shutil.rmtree(private, ignore_errors=True)


class RemoteEngine:
    """The Docker engine of another host, through one SSH connection (module docstring)."""

    def __init__(self, target: SshTarget, masters: SshMasters):
        self.target = target
        self.master = masters.get(target)
        self.name = f"ssh://{target.label}"
        self._client: Any = None

    @property
    def where(self) -> str:
        return self.name

    def unchecked(self) -> str | None:
        """Why a check of the configuration (``al validate``, ``al doctor``) does not connect:
        the agent's ssh options would run a command on this machine."""
        return self.target.unchecked()

    def option_warnings(self) -> list[str]:
        return self.target.option_warnings()

    def client(self) -> Any:
        """The SDK's client over the forwarded socket (SandboxError: one line, when the host
        or its engine cannot be reached)."""
        if self._client is not None and self.master.alive():
            return self._client
        import docker
        from docker.errors import DockerException

        local = self.master.control + ".docker.sock"
        try:
            self.master.forward("docker", "-L", f"{local}:{REMOTE_SOCKET}")
            client = docker.DockerClient(base_url=f"unix://{local}", max_pool_size=POOL_SIZE)
            client.ping()
        except SshError as exc:
            raise SandboxError(f"Docker engine {self.name} not reachable: {exc}") from None
        except DockerException as exc:
            raise SandboxError(
                f"Docker engine {self.name} not reachable through {REMOTE_SOCKET} there "
                f"(is dockerd running, and is {self.target.user or 'the user'} in its docker "
                f"group?): {exc}"
            ) from None
        self._client = client
        return client

    def handle(self) -> dict[str, Any]:
        return {"engine": self.target.to_dict()}

    def stage(self, spec: SandboxSpec) -> Staged:
        script = (
            "set -e\numask 077\nprivate=$(mktemp -d /tmp/al-docker-XXXXXXXX)\n"
            'cd -- "$private"\ntar -xpf -\nprintf "%s\\n" "$private"\n'
        )
        data = _archive(spec)
        out = self.master.script(script, data, timeout=120)
        private = out.decode(errors="replace").strip().splitlines()[-1]
        gateway = None
        if spec.gateway_socket:
            gateway = f"{private}/gw"
            remote = f"{gateway}/{os.path.basename(spec.gateway_socket)}"
            try:
                self.master.forward(f"gateway:{private}", "-R", f"{remote}:{spec.gateway_socket}")
                # The socket is created 0600 for the login user; the image's user must connect.
                # Only the container reaches it: the private dir above it is 0700.
                self.master.script(f"chmod 666 -- {shlex.quote(remote)}")
            except BaseException:
                self.unstage(private)
                raise
        shared = f"{private}/shared" if spec.shared_files else None
        return Staged(private, f"{private}/credentials", f"{private}/bin", gateway, shared)

    def unstage(self, private: str | None) -> None:
        if not private:
            return
        self.master.cancel(f"gateway:{private}")
        if not private.startswith("/tmp/al-docker-"):
            return  # only ever what stage() made
        self.master.script(f"rm -rf -- {shlex.quote(private)}")


Engine = LocalEngine | RemoteEngine


def engine_target(table: dict[str, Any], where: str) -> SshTarget | None:
    """The SSH target of an agent's ``[runtime] host`` (None: this machine's engine);
    ``ConfigError`` naming the key when it is not one."""
    host = table.get("host")
    if host is None:
        return None
    found = SSH_URL.fullmatch(str(host))
    if found is None:
        raise ConfigError(
            where, "runtime.host", f'expected "ssh://[user@]host[:port]", got {host!r}'
        )
    port = int(found["port"]) if found["port"] else None
    try:
        return SshTarget.of(
            {
                "host": found["host"].strip("[]"),
                "user": found["user"],
                "port": port,
                "key_path": table.get("key_path"),
                "ssh_options": table.get("ssh_options") or {},
            },
            "runtime",
        )
    except SshError as exc:
        key, _, message = str(exc).partition(": ")
        raise ConfigError(where, key, message) from None

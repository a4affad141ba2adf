"""Named deployment environments: one TOML file each, outside any project.

Where and how the peer keeps them, so an environment written by Action Llama works as it is:
``~/.action-llama/environments/<name>.toml`` (``$AL_ENVIRONMENTS_DIR`` overrides), beside the
credential store, with a ``[server]`` table (``host``, ``user``, ``port``, ``keyPath``,
``basePath``). We add two optional keys of our own there: ``sshOptions`` (extra ``ssh -o``
options) and ``python`` (the remote interpreter). Keys we do not know (the peer's cloud ids) are
kept and ignored. The directory is 0700 and each file 0600: a file names a host, a user and a
key.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import ConfigError, LlamaherdError

NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
MAX_NAME = 50
# What ssh takes as a destination: a host name, an ~/.ssh/config alias, an IPv4 or IPv6
# address. Never a leading "-": ssh would read it as an option (-oProxyCommand=...).
HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*(%[\w.-]+)?")
# A login name as the usual tools accept it (useradd's rule, plus upper case and dots).
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,31}\$?")
DEFAULT_USER = "root"
DEFAULT_PORT = 22
ROOT_BASE = "/opt/action-llama"  # the peer's default; other users deploy under their home
USER_BASE = "~/action-llama"
DEFAULT_PYTHON = "python3"
# Seconds active runs get to finish when the scheduler service stops (``al service``).
DEFAULT_GRACE = 300.0


def environments_dir() -> Path:
    """``$AL_ENVIRONMENTS_DIR``, else ``~/.action-llama/environments``."""
    override = os.environ.get("AL_ENVIRONMENTS_DIR")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".action-llama" / "environments"


def check_host(host: str, where: str = "--host") -> str:
    if not HOST.fullmatch(host):
        raise LlamaherdError(
            f"{where} {host!r}: expected a host name, an address or an ~/.ssh/config alias "
            "(letters, digits, '.', '-', '_'; not starting with '-')"
        )
    return host


def check_user(user: str, where: str = "--user") -> str:
    if not USER.fullmatch(user):
        raise LlamaherdError(
            f"{where} {user!r}: expected a login name (letters, digits, '.', '-', '_'; not "
            "starting with '-')"
        )
    return user


def check_name(name: str) -> str:
    if len(name) > MAX_NAME or not NAME.fullmatch(name):
        raise LlamaherdError(
            f"invalid environment name {name!r}: expected lowercase letters, digits and '-' "
            f"(not first or last), at most {MAX_NAME} characters"
        )
    return name


@dataclass(frozen=True)
class Environment:
    """Where a project is deployed: an SSH destination and a directory there."""

    name: str
    host: str
    user: str = DEFAULT_USER
    port: int = DEFAULT_PORT
    key: str | None = None
    path: str | None = None  # basePath; None: the default for ``user``
    ssh_options: tuple[str, ...] = ()
    python: str = DEFAULT_PYTHON

    @property
    def base(self) -> str:
        """The deployment directory on the server (``~/`` is the remote user's home)."""
        return self.path or (ROOT_BASE if self.user == "root" else USER_BASE)

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.base}"

    @property
    def file(self) -> Path:
        return environments_dir() / f"{self.name}.toml"

    def server_table(self) -> dict[str, Any]:
        """The ``[server]`` keys to write: only what differs from the defaults."""
        table: dict[str, Any] = {"host": self.host, "user": self.user, "port": self.port}
        optional = {
            "keyPath": self.key,
            "basePath": self.path,
            "sshOptions": list(self.ssh_options) or None,
            "python": None if self.python == DEFAULT_PYTHON else self.python,
        }
        table.update({key: value for key, value in optional.items() if value is not None})
        return table


def path_of(name: str) -> Path:
    return environments_dir() / f"{check_name(name)}.toml"


def exists(name: str) -> bool:
    return path_of(name).is_file()


def names() -> list[str]:
    directory = environments_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.toml") if NAME.fullmatch(p.stem))


def load(name: str) -> Environment:
    """The environment ``name``; a clear error when it is missing or malformed."""
    path = path_of(name)
    if not path.is_file():
        known = ", ".join(names()) or "none"
        raise LlamaherdError(
            f"no environment {name!r} (known: {known}); create it with "
            f"`al env add {name} --host HOST`"
        )
    from llamaherd.api import read_toml  # late: the project module is heavy for `al --help`

    return parse(name, read_toml(path), str(path))


def parse(name: str, data: dict[str, Any], file: str) -> Environment:
    server = data.get("server")
    if not isinstance(server, dict):
        raise ConfigError(file, "server", "missing: expected a [server] table with host = ...")

    def get(key: str, kind: type, check: Any = None, expected: str = "") -> Any:
        value = server.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ConfigError(file, f"server.{key}", f"expected {expected}, got {value!r}")
        if check is not None and not check(value):
            raise ConfigError(file, f"server.{key}", f"expected {expected}, got {value!r}")
        return value

    host = get("host", str, lambda v: v != "REPLACE_ME" and HOST.fullmatch(v), "a host name")
    if host is None:
        raise ConfigError(file, "server.host", "missing (required)")
    options = get("sshOptions", list, lambda v: all(isinstance(o, str) for o in v), "strings")
    return Environment(
        name=name,
        host=host,
        user=get("user", str, USER.fullmatch, "a login name") or DEFAULT_USER,
        port=get("port", int, lambda v: 1 <= v <= 65535, "an integer 1-65535") or DEFAULT_PORT,
        key=get("keyPath", str, str.strip, "a path"),
        path=get("basePath", str, _is_base, "an absolute path or ~/..."),
        ssh_options=tuple(options or ()),
        python=get("python", str, str.strip, "a command") or DEFAULT_PYTHON,
    )


def _is_base(value: str) -> bool:
    return value.startswith("/") or value.startswith("~/")


def save(env: Environment, *, replace: bool = False) -> Path:
    """Write the environment's file (0600, in a 0700 directory); refuse to overwrite one unless
    ``replace``."""
    path = path_of(env.name)
    if path.exists() and not replace:
        raise LlamaherdError(
            f"environment {env.name!r} already exists ({path}); use --force to replace it"
        )
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    text = "[server]\n" + "".join(
        f"{key} = {_toml_value(value)}\n" for key, value in env.server_table().items()
    )
    tmp = directory / f".{env.name}.toml.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def remove(name: str) -> Path:
    path = path_of(name)
    if not path.is_file():
        raise LlamaherdError(f"no environment {name!r} (`al env ls` lists them)")
    path.unlink()
    return path


def _toml_value(value: Any) -> str:
    """A TOML value for the few kinds an environment holds (JSON's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)

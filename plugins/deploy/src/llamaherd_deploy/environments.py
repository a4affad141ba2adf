"""Named deployment environments: the ``[server]`` table of an environment file.

The files are core's (``llamaherd.environments``: ``~/.action-llama/environments/<name>.toml``,
``$AL_ENVIRONMENTS_DIR`` overrides; their other tables layer over a project's config). Where
and how the peer keeps them, so an environment written by Action Llama works as it is: a
``[server]`` table (``host``, ``user``, ``port``, ``keyPath``, ``basePath``, ``expose``). We add
two optional keys of our own there: ``sshOptions`` (extra ``ssh -o`` options) and ``python``
(the remote interpreter). Other ``[server]`` keys (the cloud ids ``al env prov`` records, the
peer's and ours) are kept as they are. The directory is 0700 and each file 0600: a file names
a host, a user and a key.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.api import (
    Binding,
    ConfigError,
    LlamaherdError,
    environment_file,
    environment_names,
    environments_dir,
    read_environment,
)
from llamaherd.api import check_environment_name as check_name

__all__ = ["check_name", "environments_dir"]

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
PENDING = "PENDING"  # the peer's host while a provisioned server has no address yet
PLACEHOLDER = "REPLACE_ME"  # the host `al env init` writes
# Seconds active runs get to finish when the scheduler service stops (``al service``).
DEFAULT_GRACE = 300.0
OWN_KEYS = ("host", "user", "port", "keyPath", "basePath", "sshOptions", "python", "expose")


CHARACTERS = "(letters, digits, '.', '-', '_'; not starting with '-')"


def check_host(host: str, where: str = "--host") -> str:
    if not HOST.fullmatch(host):
        expected = f"a host name, an address or an ~/.ssh/config alias {CHARACTERS}"
        raise LlamaherdError(f"{where} {host!r}: expected {expected}")
    return host


def check_user(user: str, where: str = "--user") -> str:
    if not USER.fullmatch(user):
        raise LlamaherdError(f"{where} {user!r}: expected a login name {CHARACTERS}")
    return user


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
    expose: bool = False  # the deployed gateway listens on every interface (a push sets bind)
    extra: dict[str, Any] = field(default_factory=dict)  # other [server] keys: cloud ids
    layers: dict[str, Any] = field(default_factory=dict)  # the file's other tables

    @property
    def base(self) -> str:
        """The deployment directory on the server (``~/`` is the remote user's home)."""
        return self.path or (ROOT_BASE if self.user == "root" else USER_BASE)

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.base}"

    @property
    def file(self) -> Path:
        return environment_file(self.name)

    @property
    def pending(self) -> bool:
        """A server `al env prov` created that has no address yet."""
        return self.host == PENDING

    def server_table(self) -> dict[str, Any]:
        """The ``[server]`` keys to write: only what differs from the defaults."""
        table: dict[str, Any] = {"host": self.host, "user": self.user, "port": self.port}
        optional = {
            "keyPath": self.key,
            "basePath": self.path,
            "sshOptions": list(self.ssh_options) or None,
            "python": None if self.python == DEFAULT_PYTHON else self.python,
            "expose": self.expose or None,
        }
        table.update({key: value for key, value in optional.items() if value is not None})
        return {**table, **self.extra}


def is_name(name: str) -> bool:
    try:
        check_name(name)
    except LlamaherdError:
        return False
    return True


def path_of(name: str) -> Path:
    return environment_file(name)


def exists(name: str) -> bool:
    return path_of(name).is_file()


def names() -> list[str]:
    return environment_names()


def read(name: str) -> dict[str, Any]:
    """The environment file's data; a clear error when there is none."""
    return read_environment(Binding(name))


def load(name: str) -> Environment:
    """The environment ``name`` with its server; a clear error when it is missing, has no
    ``[server]`` or a malformed one."""
    return parse(name, read(name), str(path_of(name)))


def parse(name: str, data: dict[str, Any], file: str) -> Environment:
    server = data.get("server")
    if not isinstance(server, dict):
        raise ConfigError(
            file,
            "server",
            "missing: this environment only layers settings over projects; a server to "
            "deploy to needs a [server] table with host = ...",
        )

    def get(key: str, kind: type, check: Any = None, expected: str = "") -> Any:
        value = server.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ConfigError(file, f"server.{key}", f"expected {expected}, got {value!r}")
        if check is not None and not check(value):
            raise ConfigError(file, f"server.{key}", f"expected {expected}, got {value!r}")
        return value

    host = get("host", str, lambda v: v != PLACEHOLDER and HOST.fullmatch(v), "a host name")
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
        expose=bool(get("expose", bool, None, "true or false")),
        extra={k: v for k, v in server.items() if k not in OWN_KEYS},
        layers={k: v for k, v in data.items() if k != "server"},
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
    return write(env.name, {"server": env.server_table(), **env.layers})


def write(name: str, data: dict[str, Any]) -> Path:
    """Write environment ``name``'s file with ``data`` at once (0600, in a 0700 directory)."""
    path = path_of(name)
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    tmp = directory / f".{name}.toml.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(dumps(data))
    os.replace(tmp, path)
    return path


def remove(name: str) -> Path:
    path = path_of(name)
    if not path.is_file():
        raise LlamaherdError(f"no environment {name!r} (`al env list` lists them)")
    path.unlink()
    return path


def dumps(data: dict[str, Any], table: tuple[str, ...] = ()) -> str:
    """TOML for what an environment holds: values, then each table (``[a.b]``) after them."""
    lines = [f"{_key(k)} = {_toml_value(v)}\n" for k, v in data.items() if not isinstance(v, dict)]
    text = "".join(lines)
    for key, value in data.items():
        if isinstance(value, dict):
            name = (*table, key)
            body = dumps(value, name)
            text += ("\n" if text else "") + f"[{'.'.join(map(_key, name))}]\n" + body
    return text


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    """A TOML value (JSON's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value), ensure_ascii=False)

"""An agent's ``[runtime] type = "ssh"`` table: one host (the peer's keys) or a pool.

::

    [runtime]
    type = "ssh"
    host = "build-1.internal"   # the peer's keys: host, port, user, key_path, cwd, ssh_options
    user = "agent"
    key_path = "~/.ssh/agent_ed25519"
    cwd = "/srv/agents"         # runs get private dirs under <cwd>/.al-runs/ (default: ~)
    ssh_options = { UserKnownHostsFile = "~/.ssh/known_hosts_agents" }

    # or a pool (beyond the peer): each entry takes the keys above, the table's are defaults
    hosts = [
      { host = "build-1.internal", capacity = 2 },
      { host = "build-2.internal", capacity = 1, user = "ci" },
    ]
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from llamaherd.api import ConfigError, SshError, SshTarget

# The keys of one host, at the table's top level and in each `hosts` entry.
_HOST_KEYS: dict[str, Any] = {
    "host": {"type": "string", "minLength": 1, "description": "Host name, address or ~/.ssh/config alias."},
    "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "SSH port (default: ssh's, 22)."},
    "user": {"type": "string", "minLength": 1, "description": "Remote login (default: ssh's)."},
    "key_path": {"type": "string", "minLength": 1, "description": "Private key to log in with (default: ssh's keys and agent)."},
    "cwd": {
        "type": "string",
        "minLength": 1,
        "description": "Remote dir under which each run gets a private dir, <cwd>/.al-runs/<run-id>/ (default: the remote user's home; relative paths and ~/ are from there).",
    },
    "ssh_options": {
        "type": "object",
        "additionalProperties": {"type": ["string", "integer", "boolean"]},
        "description": "Extra ssh_config options, e.g. { UserKnownHostsFile = \"...\" } (ControlMaster, ControlPath, ControlPersist and BatchMode are llamaherd's).",
    },
    "capacity": {
        "type": "integer",
        "minimum": 1,
        "description": "Most runs on this host at once, across every scheduler sharing the database (default: no limit for one host, 1 for a pool entry).",
    },
}  # fmt: skip

SCHEMA: dict[str, Any] = {
    **_HOST_KEYS,
    "hosts": {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "properties": _HOST_KEYS,
            "required": ["host"],
            "additionalProperties": False,
        },
        "description": "A pool: each run goes to the least-loaded reachable host; entries take the table's keys as defaults.",
    },
    "keepWorkdir": {
        "type": "boolean",
        "default": False,
        "description": "Keep the run's work dir on the host after the run (credentials are removed anyway).",
    },
}  # fmt: skip

DEFAULT_CWD = "~"
POOL_CAPACITY = 1


@dataclass(frozen=True)
class Host:
    """One host an agent's runs may go to."""

    target: SshTarget
    cwd: str
    capacity: int | None  # None: no limit (one host without `capacity`)

    @property
    def key(self) -> str:
        """The host's name in the pool's tables (``user@host:port``): runs counted together
        against its capacity, whichever agent or scheduler started them."""
        return self.target.label


@dataclass(frozen=True)
class Settings:
    hosts: tuple[Host, ...]
    keep_workdir: bool
    where: str  # the agent's config file, for messages

    @property
    def pool(self) -> bool:
        """Whether runs are placed (a pool, or one host with a capacity)."""
        return len(self.hosts) > 1 or self.hosts[0].capacity is not None

    @classmethod
    def of(cls, agent: Any) -> Settings:
        """The agent's settings; ``ConfigError`` naming the key when they are unusable."""
        where = "config.toml"
        with contextlib.suppress(Exception):
            where = agent.project.relative(agent.config_file)
        table = agent.runtime
        entries = table.get("hosts")
        if entries is not None and "host" in table:
            raise ConfigError(
                where, "runtime.hosts", 'give either "host" (one host) or "hosts" (a pool)'
            )
        if entries is None:
            if not table.get("host"):
                raise ConfigError(where, "runtime.host", 'missing: the host to run on (or "hosts")')
            hosts = (_host(table, {}, "runtime", where, None),)
        else:
            defaults = {k: v for k, v in table.items() if k in _HOST_KEYS and k != "capacity"}
            hosts = tuple(
                _host(defaults, entry, f"runtime.hosts[{i}]", where, POOL_CAPACITY)
                for i, entry in enumerate(entries)
            )
            seen: set[str] = set()
            for i, host in enumerate(hosts):
                if host.key in seen:
                    raise ConfigError(where, f"runtime.hosts[{i}]", f"{host.key} is listed twice")
                seen.add(host.key)
        return cls(hosts, bool(table.get("keepWorkdir", False)), where)


def _host(
    defaults: dict[str, Any],
    entry: dict[str, Any],
    key: str,
    where: str,
    capacity: int | None,
) -> Host:
    table = {**defaults, **entry}
    try:
        target = SshTarget.of(table, key)
    except SshError as exc:
        path, _, message = str(exc).partition(": ")
        raise ConfigError(where, path, message) from None
    cwd = str(table.get("cwd") or DEFAULT_CWD)
    if "\n" in cwd or "\0" in cwd:
        raise ConfigError(where, f"{key}.cwd", "expected a path on one line")
    return Host(target, cwd, table.get("capacity", capacity))

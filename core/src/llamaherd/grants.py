"""What an agent's config lets the agent do beyond answering its triggers: its *grants*.

An agent's config may hand it powers over this machine or over secrets: the OS user its
commands run as and that user's groups, commands run for it (hooks), the credentials it is
given, another machine to run on (logged in with this machine's keys, through ssh options that
may run commands here). ``al add`` and ``al update`` bring in configs written by someone else,
so they show every grant and install it only when the user agrees.

What counts as a grant is decided from a *positive* list, :data:`HARMLESS`: the keys known to
grant nothing (when a trigger fires, how long and how often runs go, which model, their limits).
Every other key is a grant, so a key added tomorrow, by core or by any plugin, is asked about
until someone has judged it and listed it here. :data:`POWERS` only explains the grants it
knows; the others are shown as "not known to be harmless".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Key paths (dotted, under the agent's config; an entry of a list of tables counts as the list:
# ``runtime.hosts.port``) known to grant nothing, with the values that are harmless (None: any
# value, the tables and lists under it included).
HARMLESS: Mapping[str, frozenset[Any] | None] = {
    # Where `al add` got it, the model it uses, what the runs are given to read.
    "source": None,
    "models": None,
    "params": None,
    # When it runs: a cron schedule or interval, webhook routes and their filters.
    "schedule": None,
    "every": None,
    "timezone": None,
    "catchUp": None,
    "webhooks": None,
    # How much, how long, how often; flow control; the states it may set itself.
    "scale": None,
    "timeout": None,
    "maxWorkQueueSize": None,
    "maxReruns": None,
    "waitTimeout": None,
    "maxTurns": None,
    "suspendTimeout": None,
    "onInterrupted": None,
    "loop_mode": None,
    "selfStates": None,
    "flow": None,
    "budget": None,
    "harness": None,
    # The default runtime (a container) and the limits of its sandbox; keeping a work dir.
    "runtime.type": frozenset({"container"}),
    "runtime.network": None,
    "runtime.memory": None,
    "runtime.cpus": None,
    "runtime.pids": None,
    "runtime.tmpSize": None,
    "runtime.homeSize": None,
    "runtime.keepWorkdir": None,
    # Of a remote host (the host itself is a grant): its port, where runs go, how many.
    **{f"runtime.{at}{key}": None for at in ("", "hosts.") for key in ("port", "cwd", "capacity")},
}

# What the grants llamaherd knows let the agent do, by key path (a key without an entry of its
# own is explained by the table it is in).
_HOST_POWERS = {
    "host": "a machine its commands run on (or its Docker engine), reached with this "
    "machine's ssh keys and config",
    "user": "the login its commands run as on that machine",
    "key_path": "a private key of this machine to log in with",
    "ssh_options": "an ssh client option (some, such as ProxyCommand, run commands on this "
    "machine)",
}
RUNS_A_COMMAND = "runs a command on this machine, as the scheduler's user, whenever ssh connects"
POWERS: Mapping[str, str] = {
    "credentials": "secrets handed to the agent",
    "hooks": "shell commands run before/after the model",
    "runtime.type": "where its commands run: host-user = processes on this machine, "
    "ssh = another machine, logged in as this machine's user",
    "runtime.run_as": "the OS user its commands run as",
    "runtime.groups": "OS groups of its processes (docker, disk, shadow, sudo, adm, 0... "
    "are as good as root)",
    "runtime.hosts": "machines its commands run on, reached with this machine's ssh keys",
    **{f"runtime.{at}{key}": why for at in ("", "hosts.") for key, why in _HOST_POWERS.items()},
}
UNKNOWN = "not known to be harmless"
SHOWN = 300  # characters of a value shown; the rest is in the file to review
_INDEX = re.compile(r"\[\d+\]")


@dataclass(frozen=True)
class Grant:
    """One key of a config that grants a power: its dotted path, its value, what it does."""

    key: str
    value: Any
    why: str

    def __str__(self) -> str:
        shown = repr(self.value)
        if len(shown) > SHOWN:
            shown = shown[:SHOWN] + "…"
        return f"{self.key} = {shown} ({self.why})"


def grants(config: Mapping[str, Any]) -> list[Grant]:
    """Every grant of an agent's (merged) ``config``, leaf by leaf (an empty value grants
    nothing)."""
    return list(_walk(config, ""))


def new_grants(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Grant]:
    """The grants of ``after`` that ``before`` did not have (a new key, or a new value)."""
    had = {(g.key, repr(g.value)) for g in grants(before)}
    return [g for g in grants(after) if (g.key, repr(g.value)) not in had]


def _walk(value: Any, path: str) -> Iterator[Grant]:
    plain = _INDEX.sub("", path)
    if plain in HARMLESS:
        allowed = HARMLESS[plain]
        if allowed is None or (isinstance(value, str) and value in allowed):
            return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}.{key}" if path else str(key))
        return
    elif isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
        return
    if value in (None, "", [], {}):
        return
    yield Grant(path, value, _why(plain))


def _why(plain: str) -> str:
    """What ``plain`` (a path without list indices) grants: its own entry in ``POWERS``, else
    that of the nearest table it is in."""
    from llamaherd.openssh import COMMAND_OPTIONS

    parts = plain.split(".")
    if len(parts) > 1 and parts[-2] == "ssh_options" and parts[-1].lower() in COMMAND_OPTIONS:
        return RUNS_A_COMMAND
    for end in range(len(parts), 0, -1):
        found = POWERS.get(".".join(parts[:end]))
        if found:
            return found
    return UNKNOWN

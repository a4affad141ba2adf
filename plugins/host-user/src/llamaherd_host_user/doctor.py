"""``al doctor``: the OS users host-user agents run as, with a fix that creates a missing one."""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
from typing import Any

from llamaherd.api import Finding, Fix, SandboxError
from llamaherd_host_user import identity as identities
from llamaherd_host_user.runtime import Settings


def create_user(user: str) -> str:
    """Create the system user ``user`` (as root); one line saying what was done."""
    if _exists(user):
        return f"user {user!r} already exists (uid {pwd.getpwnam(user).pw_uid})"
    if os.geteuid() != 0:
        raise SandboxError(
            f"creating user {user!r} needs root: sudo {shlex.join(identities.useradd_command(user))}"
        )
    command = identities.useradd_command(user)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SandboxError(f"{shlex.join(command)} failed: {done.stderr.strip()}")
    return f"created system user {user!r} (uid {pwd.getpwnam(user).pw_uid})"


class HostUserCheck:
    name = "host-user"
    description = "The OS users host-user agents run as: they exist and can be switched to."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        users: dict[str, list[Any]] = {}
        for agent in project.agents.values():
            if agent.runtime.get("type") == "host-user":
                users.setdefault(Settings.of(agent).run_as, []).append(agent)
        return [self._user(name, agents) for name, agents in sorted(users.items())]

    @staticmethod
    def _user(name: str, agents: list[Any]) -> Finding:
        subject = f"user {name} ({', '.join(f'agents/{a.name}' for a in agents)})"
        settings = Settings.of(agents[0])
        try:
            ident = identities.resolve(name, settings.groups, settings.where)
        except SandboxError as exc:
            fix = None
            if not _exists(name) and os.geteuid() == 0:
                fix = Fix(
                    f"create system user {name!r} (as `al setup host-user` does)",
                    lambda: create_user(name),
                )
            return Finding.error(subject, str(exc), fix)
        own = "; the user running llamaherd: no isolation" if not ident.switch else ""
        return Finding.ok(subject, f"exists (uid {ident.uid}){own}")


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True

"""``al doctor``: each host ssh agents run on is reachable, its host key verified, the key
accepted, and the remote account can run what a run needs (its login shell, ``tar``,
``python3`` for the language-skill commands, ``/proc``, a writable ``cwd``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llamaherd.api import ConfigError, Finding, SshError, SshMasters, SshTarget
from llamaherd_ssh import remote
from llamaherd_ssh.settings import Settings


class SshCheck:
    name = "ssh"
    description = "Hosts of ssh agents: reachable, host key and login key accepted, tools there."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        places: dict[tuple[SshTarget, str], list[str]] = {}
        for agent in project.agents.values():
            if agent.runtime.get("type") != "ssh":
                continue
            try:
                settings = Settings.of(agent)
            except ConfigError:
                continue  # `al validate` (and core's config check) reports it
            for host in settings.hosts:
                places.setdefault((host.target, host.cwd), []).append(f"agents/{agent.name}")
        if not places:
            return []
        masters = SshMasters()
        try:
            with ThreadPoolExecutor(max_workers=min(8, len(places))) as executor:
                return list(
                    executor.map(lambda item: _host(masters, *item[0], item[1]), places.items())
                )
        finally:
            masters.close()


def _host(masters: SshMasters, target: SshTarget, cwd: str, agents: list[str]) -> Finding:
    subject = f"ssh host {target.label} ({', '.join(agents)})"
    unchecked = target.unchecked()
    if unchecked is not None:  # al doctor runs none of an agent's commands
        return Finding.warning(subject, unchecked)
    master = masters.get(target)
    try:
        master.connect()
    except SshError as exc:
        return Finding.error(subject, str(exc).removeprefix(f"ssh {target.label}: "))
    try:
        found = dict(
            line.partition("=")[::2]
            for line in master.script(remote.probe_script(cwd)).decode().splitlines()
        )
    except SshError as exc:  # a login shell such as nologin runs nothing
        reason = str(exc).removeprefix(f"ssh {target.label}: ")
        return Finding.error(subject, f"connected, but the account runs no commands: {reason}")
    shell = found.get("shell") or "unknown"
    if not found.get("cwd"):
        return Finding.error(subject, f"cwd {cwd!r} does not exist on the host")
    if not found.get("writable"):
        return Finding.error(subject, f"cwd {found['cwd']} is not writable by the login user")
    if not found.get("tar"):
        return Finding.error(subject, "tar is not installed on the host (runs are staged with it)")
    about = f"login shell {shell}, runs under {found['cwd']}/{remote.RUNS_DIR}/"
    if not found.get("python3"):
        return Finding.warning(
            subject,
            f"reachable ({about}), but python3 is missing: the language-skill commands "
            "(al-status, rlock, ...) need it",
        )
    if not found.get("proc"):
        return Finding.warning(
            subject,
            f"reachable ({about}), but /proc is not readable: a kill reaches only the "
            "commands' process groups, not what left them",
        )
    return Finding.ok(subject, f"reachable, host key and key accepted; {about}")

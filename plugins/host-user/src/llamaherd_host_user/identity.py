"""Who a run's processes run as: the agent's OS user, its groups, and whether we switch to it."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shlex
from dataclasses import dataclass
from typing import Any

from llamaherd.api import SandboxError

DEFAULT_USER = "al-agent"


def useradd_command(user: str) -> list[str]:
    """The command that creates a system user for agent runs (no login home: HOME is per run)."""
    return [
        "useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
        "--shell", "/bin/sh", "--comment", "llamaherd agent runs", user,
    ]  # fmt: skip


def current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


@dataclass(frozen=True)
class Identity:
    """A resolved agent user. ``switch`` is False when it is the user running llamaherd."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    @property
    def switch(self) -> bool:
        return self.uid != os.geteuid()

    def popen_kwargs(self) -> dict[str, Any]:
        """Arguments that make ``subprocess.Popen`` switch to this user in the child.

        As root ``extra_groups`` is always given: otherwise the child would keep root's
        supplementary groups. Without root nothing can change, so nothing is asked.
        """
        if os.geteuid() != 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": list(self.groups)}


# Groups whose members can become root, or read what root keeps secret, on a usual Linux host
# (by name; gid 0 is root's whatever its name): an agent's processes given one can take the
# machine. ``al validate`` warns; a fetched config that sets any group is asked about (``al add``).
ROOT_EQUIVALENT_GROUPS: dict[str, str] = {
    "root": "root's own group",
    "sudo": "may become root with sudo",
    "wheel": "may become root with sudo or su",
    "admin": "may become root with sudo",
    "adm": "reads the system's logs",
    "systemd-journal": "reads the system's journal",
    "disk": "reads and writes every disk directly",
    "kmem": "reads the kernel's memory",
    "shadow": "reads the password hashes",
    "docker": "controls the Docker daemon, which runs as root",
    "lxd": "starts privileged containers",
    "incus-admin": "starts privileged containers",
    "libvirt": "starts virtual machines with the host's devices",
    "staff": "writes /usr/local, where root's PATH looks first",
}


def root_equivalent(group: str) -> tuple[str, str] | None:
    """(its name, what it allows) when ``group`` (a name or a gid) is one of
    ``ROOT_EQUIVALENT_GROUPS``; gid 0 is root's whatever this host calls it."""
    name: str | None = group
    if group.isdigit():
        name = _group_name(int(group)) or ("root" if int(group) == 0 else None)
    what = ROOT_EQUIVALENT_GROUPS.get(name or "")
    return (name, what) if name and what else None


def _group_name(gid: int) -> str | None:
    with contextlib.suppress(KeyError):
        return grp.getgrgid(gid).gr_name
    return None


def _group_id(name: str | int, where: str) -> int:
    try:
        return (
            grp.getgrgid(int(name)).gr_gid
            if str(name).isdigit()
            else grp.getgrnam(str(name)).gr_gid
        )
    except KeyError:
        raise SandboxError(
            f"{where}: runtime.groups: group {name!r} does not exist on this host"
        ) from None


def resolve(run_as: str, groups: list[str], where: str) -> Identity:
    """Look up ``run_as`` and ``groups``; raise SandboxError with the fix when that cannot work."""
    try:
        entry = pwd.getpwnam(run_as)
    except KeyError:
        raise SandboxError(
            f"{where}: runtime.run_as: user {run_as!r} does not exist; create it with "
            f"`sudo al setup host-user --user {run_as}` "
            f"(or: sudo {shlex.join(useradd_command(run_as))})"
        ) from None
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        me = current_user()
        raise SandboxError(
            f"{where}: runtime.run_as: cannot run as {run_as!r}: llamaherd runs as {me!r}, not "
            f"root, so it cannot switch user; run the scheduler as root (sudo al start), or set "
            f'run_as = "{me}" (no isolation from your own files)'
        )
    extra = set(os.getgrouplist(run_as, entry.pw_gid))
    wanted = {_group_id(name, where) for name in groups}
    if os.geteuid() != 0 and not wanted <= set(os.getgroups()) | {os.getegid()}:
        raise SandboxError(
            f"{where}: runtime.groups: without root only groups {run_as!r} already has can be "
            "used; run the scheduler as root or remove them"
        )
    extra.update(wanted)
    return Identity(run_as, entry.pw_uid, entry.pw_gid, tuple(sorted(extra)))

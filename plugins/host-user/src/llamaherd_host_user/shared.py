"""The project's ``shared/`` files at ``/app/static/shared``, the path a container shows them at.

The host has no ``/app/static`` of ours, and a host path would be shared by every project and
run; so each process of a run with shared files starts in a mount namespace of its own
(``unshare``), where a small tmpfs covers ``/app`` and the run's staged copy
(``<run>.al/static``) is bound read-only at ``/app/static``; then it becomes the agent's user
(``setpriv``). That needs root (which switching users needs anyway) and util-linux; without them
the files are not staged and ``al validate`` says so. ``/app`` is created (empty) on the host
as the mount point when missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from llamaherd.api import StagedFile
from llamaherd_host_user.identity import Identity
from llamaherd_host_user.layout import Layout

APP = Path("/app")
_UNSHARE = shutil.which("unshare", path="/usr/bin:/bin")
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
# $0 is the staged static dir; the rest is the command, run as the agent's user.
_MOUNT = (
    "mount -t tmpfs -o mode=0755,size=64k al-static /app && mkdir /app/static "
    '&& mount --bind -o ro "$0" /app/static || exit 125; exec "$@"'
)


def unavailable() -> str | None:
    """Why shared files cannot be shown at /app/static/shared here, or None when they can."""
    if os.geteuid() != 0:
        return "the scheduler does not run as root"
    if _UNSHARE is None or _SETPRIV is None:
        return "unshare and setpriv (util-linux) are not installed"
    if APP.exists() and not APP.is_dir():
        return f"{APP} is not a directory"
    return None


def stage(layout: Layout, files: list[StagedFile]) -> None:
    """Write the run's copy of the shared files under ``<run>.al/static/shared``: root's,
    readable by everyone (the agent reads them through the bind)."""
    with contextlib.suppress(FileExistsError):
        APP.mkdir(mode=0o755)  # the mount point: stays empty on the host
    root = layout.static / "shared"
    for directory in (layout.static, root):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    for staged in files:
        target = root / staged.path
        for parent in reversed(target.relative_to(root).parents[:-1]):
            (root / parent).mkdir(mode=0o755, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "wb") as fh:
            fh.write(staged.content)


def staged(layout: Layout) -> bool:
    return layout.static.is_dir()


def wrap(argv: list[str], layout: Layout, identity: Identity) -> list[str]:
    """``argv`` started as root in a new mount namespace showing the run's shared files, then
    run as the agent's user with no new privileges (``subprocess.Popen`` without a user)."""
    assert _UNSHARE is not None and _SETPRIV is not None
    become = [_SETPRIV]
    if identity.switch:
        groups = ",".join(str(g) for g in identity.groups)
        become += [f"--reuid={identity.uid}", f"--regid={identity.gid}"]
        become += [f"--groups={groups}"] if groups else ["--clear-groups"]
    become.append("--no-new-privs")
    return [
        _UNSHARE, "--mount", "--propagation", "private",
        "/bin/sh", "-c", _MOUNT, str(layout.static), *become, *argv,
    ]  # fmt: skip

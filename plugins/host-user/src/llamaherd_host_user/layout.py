"""Where a run's files live on the host, and who owns what.

::

    /tmp/al-runs/                   root, 0711: entries can be reached by name, not listed
      <run_id>/                     agent user, 0700: the working dir and $HOME
      .<run_id>.al.new/             root, 0711: the private area while it is made, renamed
                                    into place once its owner record is in it
      <run_id>.al/                  root, 0711: the run's private area (removed by cleanup)
        owner.json                  root, 0600: which scheduler process owns the sandbox
                                    (removed last: see ``Layout.remove``)
        bin/                        root, 0755: copies of the language-skill commands
        credentials/<type>/<instance>/<field>   agent user, dirs 0700, files 0400
        tmp/                        agent user, 0700: $TMPDIR
        static/shared/              root, 0755, files 0444: the project's shared/ files,
                                    shown at /app/static/shared (``shared.py``)

Without root (``run_as`` = the current user) the base is ``/tmp/al-runs-<uid>/`` (0700), since
``/tmp/al-runs`` may belong to root.

``/tmp`` is everyone's: another local user can make ``/tmp/al-runs`` first (after a reboot,
before the first run), and every host-user run then failed, its agent held in ``error``. So that
name is used only while it is a directory of ours; else the runs go to a private base,
``/tmp/al-runs-<uid>-<random>/``, made by ``mkdtemp`` (a name nobody can guess, created
atomically). Nothing needs to record it: the kernel does, as its owner (no other user can make
a directory that is ours), so the next run and the next start's orphan sweep find it again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import SandboxError

log = logging.getLogger("llamaherd.host_user")

TMP = Path("/tmp")
ROOT_BASE = TMP / "al-runs"
PRIVATE_SUFFIX = ".al"
ASIDE_SUFFIX = PRIVATE_SUFFIX + ".new"
OWNER_FILE = "owner.json"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@+-]*$")


def safe_run_id(run_id: str) -> str:
    """Refuse run ids that would leave the runs dir (``..``, ``/``), hide, or look private."""
    if not _SAFE_NAME.match(run_id) or run_id.endswith(PRIVATE_SUFFIX):
        raise SandboxError(f"host-user: run id {run_id!r} is not a safe directory name")
    return run_id


SCOPE_PREFIX = "base-"  # the cgroup directory of one runs base's runs (``base_scope``)


def runs_base() -> Path:
    """The directory holding every run's working dir: ``/tmp/al-runs`` (``-<uid>`` without
    root), created if missing, unless another user has that name; then a private one."""
    uid = os.geteuid()
    preferred = _preferred_base(uid)
    with contextlib.suppress(FileExistsError):
        preferred.mkdir(mode=_base_mode(uid))
    if _ours(preferred, uid):
        return _private_mode(preferred, uid)
    found = _private_bases(uid)
    if found:
        return _private_mode(found[0], uid)
    made = Path(tempfile.mkdtemp(prefix=_private_prefix(uid), dir=TMP))
    log.warning(
        "host-user: %s is not a directory of uid %d (another user made it first): runs use %s",
        preferred,
        uid,
        made,
    )
    return _private_mode(made, uid)


def run_bases() -> list[Path]:
    """Every base of this user's runs (what an orphan sweep looks through): ``/tmp/al-runs``
    when it is ours, and the private ones made while it was not."""
    uid = os.geteuid()
    preferred = _preferred_base(uid)
    return ([preferred] if _ours(preferred, uid) else []) + _private_bases(uid)


def _preferred_base(uid: int) -> Path:
    return ROOT_BASE if uid == 0 else Path(f"{ROOT_BASE}-{uid}")


def _base_mode(uid: int) -> int:
    return 0o711 if uid == 0 else 0o700


def _private_prefix(uid: int) -> str:
    return f"{ROOT_BASE.name}-{uid}-"


def _ours(path: Path, uid: int) -> bool:
    """A directory (not a link to one) owned by ``uid``: in the sticky /tmp, nobody else can
    have made it, nor move or remove it."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid


def _private_bases(uid: int) -> list[Path]:
    prefix = _private_prefix(uid)
    with os.scandir(TMP) as entries:
        names = [entry.name for entry in entries if entry.name.startswith(prefix)]
    return [TMP / name for name in sorted(names) if _ours(TMP / name, uid)]


def _private_mode(base: Path, uid: int) -> Path:
    """``base``, its mode made what the layout needs (0711 for root: agent users reach their
    own working dir by name, and list nothing)."""
    mode = _base_mode(uid)
    if stat.S_IMODE(base.lstat().st_mode) != mode:
        base.chmod(mode)
    return base


def process_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot: tells a live pid from a reused one."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return data.rsplit(")", 1)[1].split()[19]


def owner_record(project: str | None, keep_workdir: bool) -> dict[str, object]:
    pid = os.getpid()
    return {
        "pid": pid,
        "start": process_start(pid),
        "host": socket.gethostname(),
        "project": project,
        "keep_workdir": keep_workdir,
    }


def base_scope(base: Path) -> str:
    """The name of ``base``'s cgroup scope: its device and inode, so schedulers that see other
    ``/tmp``s (a systemd ``PrivateTmp``, containers sharing the cgroup tree) never take each
    other's runs' cgroups for their own."""
    info = base.stat()
    return f"{SCOPE_PREFIX}{info.st_dev:x}-{info.st_ino:x}"


@dataclass(frozen=True)
class Layout:
    base: Path
    run_id: str

    @property
    def cgroup(self) -> Path:
        """The run's cgroup, relative to the cgroup tree's llamaherd directory: in its base's
        scope (``base_scope``)."""
        return Path(base_scope(self.base)) / self.run_id

    @property
    def workdir(self) -> Path:
        return self.base / self.run_id

    @property
    def private(self) -> Path:
        return self.base / (self.run_id + PRIVATE_SUFFIX)

    @property
    def aside(self) -> Path:
        """Where the private area is made before it is renamed into place."""
        return self.base / f".{self.run_id}{ASIDE_SUFFIX}"

    @property
    def bin(self) -> Path:
        return self.private / "bin"

    @property
    def credentials(self) -> Path:
        return self.private / "credentials"

    @property
    def tmp(self) -> Path:
        return self.private / "tmp"

    @property
    def static(self) -> Path:
        return self.private / "static"

    @property
    def owner_file(self) -> Path:
        return self.private / OWNER_FILE

    def write_owner(
        self,
        project: str | None = None,
        keep_workdir: bool | None = None,
        into: Path | None = None,
    ) -> None:
        """Record this process (and the project root and whether the working dir is kept,
        both kept from the old record when None) as the sandbox's owner: at start (``into``
        the private area being made), and on attach after a restart."""
        old = self.owner()
        project = project or old.get("project")
        keep = bool(old.get("keep_workdir")) if keep_workdir is None else keep_workdir
        folder = self.private if into is None else into
        # Written aside, then renamed: another process's orphan sweep never reads it half done.
        tmp = folder / f".{OWNER_FILE}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(owner_record(project, keep), fh)
        os.replace(tmp, folder / OWNER_FILE)

    def owner(self, folder: Path | None = None) -> dict[str, Any]:
        """The owner record of the private area (or of ``folder``, the area being made)."""
        try:
            owner = json.loads(((folder or self.private) / OWNER_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def remove(self, keep_workdir: bool = False) -> None:
        """Delete the working dir (unless kept), then the private area, its owner record
        last: a scheduler killed part way leaves the record, by which the next start's orphan
        sweep (``cleanup_orphans``) finds the rest. (Removed first, it once leaked the
        working dir for good.)"""
        if not keep_workdir:
            # rmtree works through directory fds, so symlinks the agent planted are not followed.
            shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.aside, ignore_errors=True)  # left by a start killed before its rename
        try:
            entries = [entry for entry in os.scandir(self.private) if entry.name != OWNER_FILE]
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.owner_file)
        with contextlib.suppress(OSError):
            os.rmdir(self.private)


def held_by_other_live_process(owner: dict[str, Any]) -> bool:
    """True when ``owner`` (a sandbox's owner record) names another scheduler process of
    this host that is still running: the sandbox is that process's, whatever this one knows."""
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    return owner.get("host") == socket.gethostname() and process_start(pid) == owner.get("start")

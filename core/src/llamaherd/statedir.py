"""The project's state directory (``.al/``) is private to the scheduler's user.

It holds the work queue (every run's transcript and events), the scheduler's log and the control
token: nothing in it is for agents or other local users. So ``.al/`` and every directory in it
are 0700 and every file 0600, whatever the umask; the scheduler checks (and fixes) that at start,
and files are created with those modes (``open_private``) rather than fixed afterwards.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("llamaherd.statedir")

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` created if missing (parents too) and made 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def open_private(path: Path, mode: str = "ab") -> BinaryIO:
    """Open ``path`` (binary ``mode``), created 0600; an existing file is made 0600 too."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, mode)


def secure(state_dir: Path) -> list[Path]:
    """Make ``state_dir`` 0700 and everything under it private (directories 0700, files 0600,
    group and other bits cleared); returns what had to be fixed. Symlinks are not followed
    (a symlinked ``.al`` itself is: a deployment keeps its state elsewhere)."""
    fixed = []
    for path, want in _entries(state_dir):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != want:
            path.chmod(want)
            fixed.append(path)
    if fixed:
        log.warning(
            "%s: made %d path(s) private to the scheduler's user (were readable by others): %s",
            state_dir,
            len(fixed),
            ", ".join(str(p.relative_to(state_dir)) for p in fixed[:5]),
        )
    return fixed


def _entries(state_dir: Path) -> list[tuple[Path, int]]:
    private_dir(state_dir)
    found: list[tuple[Path, int]] = [(state_dir, DIR_MODE)]
    for root, dirs, files in os.walk(state_dir):
        for name in dirs:
            path = Path(root, name)
            if not path.is_symlink():
                found.append((path, DIR_MODE))
        for name in files:
            path = Path(root, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append((path, FILE_MODE))
    return found

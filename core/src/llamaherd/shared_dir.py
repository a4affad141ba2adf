"""The project's ``shared/`` directory: files every agent's sandbox sees at ``/app/static/shared``.

Action Llama bakes ``shared/`` into every agent image at ``/app/static/shared/`` (SKILL.md
files read them with ``!`cat /app/static/shared/conventions.md```). Here each run gets the files
as they were when it started, read-only, through its runtime (``SandboxSpec.shared_files``).
Dotfiles are left out, as Action Llama leaves them out; a symbolic link is followed only when
its target is inside the project (one pointing elsewhere, at the credential store say, would
hand the agent a file of the scheduler's user); the total is bounded.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from llamaherd.errors import LlamaherdError
from llamaherd.types import StagedFile

SHARED_DIR = "shared"
MAX_SHARED_BYTES = 32 * 1024 * 1024
MAX_SHARED_FILES = 10_000
FILE_MODE = 0o444


def shared_entries(root: Path) -> Iterator[tuple[str, Path, str | None]]:
    """Each file under ``<root>/shared`` a run considers, in order: (its path relative to
    ``shared/``, its path, why it is left out or None). Dotfiles and dot-directories are never
    listed (as Action Llama leaves them out); a symbolic link out of the project is listed with
    the reason. What runs stage and what ``al push`` ships (``llamaherd.api``) are these."""
    base = root / SHARED_DIR
    if not base.is_dir():
        return
    project = root.resolve()
    for directory, dirs, names in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            path = Path(directory, name)
            relative = path.relative_to(base).as_posix()
            if path.is_symlink() and not path.resolve().is_relative_to(project):
                yield relative, path, f"{relative} links outside the project: left out of every run"
            elif path.is_file():
                yield relative, path, None


def shared_files(root: Path) -> tuple[list[StagedFile], list[str]]:
    """The files of ``<root>/shared`` (paths relative to it), and a note for each one left
    out. LlamaherdError when they exceed MAX_SHARED_BYTES or MAX_SHARED_FILES."""
    files: list[StagedFile] = []
    skipped: list[str] = []
    total = 0
    for relative, path, left_out in shared_entries(root):
        if left_out:
            skipped.append(left_out)
            continue
        content = path.read_bytes()
        total += len(content)
        if total > MAX_SHARED_BYTES or len(files) >= MAX_SHARED_FILES:
            raise LlamaherdError(
                f"{SHARED_DIR}/: more than {MAX_SHARED_BYTES // 2**20} MiB or "
                f"{MAX_SHARED_FILES} files: every run stages them; keep large data "
                "elsewhere (fetch it in a hooks.pre command)"
            )
        files.append(StagedFile(relative, content, FILE_MODE))
    return files, skipped

"""Creating a run's working dir and private area: commands, credentials, tmp.

Everything is written by the scheduler before any process of the run exists, inside
directories only root can create entries in, and handed to the agent user at the end; so no
agent-planted symlink can redirect a write.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

from llamaherd.api import SandboxSpec, StagedFile
from llamaherd_host_user import shared
from llamaherd_host_user.identity import Identity
from llamaherd_host_user.layout import Layout


def _give(path: Path, identity: Identity, mode: int) -> None:
    if identity.switch:
        os.chown(path, identity.uid, identity.gid, follow_symlinks=False)
    path.chmod(mode)


def _mkdir(path: Path, identity: Identity | None, mode: int) -> Path:
    path.mkdir(mode=0o700)
    if identity is not None:
        _give(path, identity, mode)
    else:
        path.chmod(mode)
    return path


def _copy_commands(source: Path | None, target: Path, base: Path) -> None:
    """The language-skill commands in the run's ``bin``: hard links to one copy of them per
    runs base (``shared_commands``), not a copy each (sixteen files: a tenth of a run's start)."""
    _mkdir(target, None, 0o755)
    if source is None or not Path(source).is_dir():
        return
    for entry in os.scandir(shared_commands(Path(source), base)):
        dest = target / entry.name
        try:
            os.link(entry.path, dest)
        except OSError:  # a file system without hard links: a copy, as before
            shutil.copyfile(entry.path, dest)
            dest.chmod(0o755)


_COMMANDS: dict[tuple[str, str], Path] = {}
_COMMANDS_LOCK = threading.Lock()


def shared_commands(source: Path, base: Path) -> Path:
    """The commands of ``source`` copied once into ``base`` (``.commands-<digest of their
    names and contents>``: 0755 files of ours, in a directory only we write), made aside and
    renamed into place (another scheduler may make the same at once). The orphan sweep leaves
    it alone; a new version of the commands is a new digest."""
    key = (str(source), str(base))
    with _COMMANDS_LOCK:
        found = _COMMANDS.get(key)
        if found is not None and found.is_dir():
            return found
        files = {e.name: Path(e.path).read_bytes() for e in os.scandir(source) if e.is_file()}
        digest = hashlib.sha256()
        for name, data in sorted(files.items()):
            digest.update(name.encode() + b"\0" + data + b"\0")
        target = base / f".commands-{digest.hexdigest()[:16]}"
        if not target.is_dir():
            aside = Path(tempfile.mkdtemp(prefix=".commands-", suffix=".new", dir=base))
            for name, data in files.items():
                fd = os.open(aside / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(aside / name, 0o755)
            aside.chmod(0o755)
            try:
                os.rename(aside, target)
            except OSError:  # made by another scheduler meanwhile
                shutil.rmtree(aside, ignore_errors=True)
        _COMMANDS[key] = target
        return target


def _stage_credentials(files: list[StagedFile], root: Path, identity: Identity) -> None:
    """Write each of the run's credential files at ``<root>/<type>/<instance>/<field>``, owned
    by the agent's user with the mode core chose (never following a planted symlink)."""
    _mkdir(root, identity, 0o700)
    for staged in files:
        *dirs, name = staged.path.split("/")
        directory = root
        for part in dirs:
            directory = directory / part
            if not directory.exists():
                _mkdir(directory, identity, 0o700)
        path = directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(staged.content)
        _give(path, identity, staged.mode)


def provision(
    layout: Layout, identity: Identity, spec: SandboxSpec | None, keep_workdir: bool
) -> None:
    """Create the working dir and the private area of a new run (both must not exist)."""
    _mkdir(layout.workdir, identity, 0o700)
    provision_private(layout, identity, spec, keep_workdir)


def provision_private(
    layout: Layout, identity: Identity, spec: SandboxSpec | None, keep_workdir: bool
) -> None:
    project = str(spec.project.root) if spec and spec.project is not None else None
    # Made aside and renamed into place with its owner record already in it: another
    # scheduler's orphan sweep takes a private area without one for a cleanup's leftover.
    # One left by a start of this run killed before its rename is this run's own to replace.
    shutil.rmtree(layout.aside, ignore_errors=True)
    _mkdir(layout.aside, None, 0o711)
    layout.write_owner(project, keep_workdir, into=layout.aside)
    if layout.private.exists():
        raise FileExistsError(f"{layout.private} exists")
    os.rename(layout.aside, layout.private)
    _copy_commands(spec.bin_dir if spec else None, layout.bin, layout.base)
    _mkdir(layout.tmp, identity, 0o700)
    _stage_credentials(spec.credential_files if spec else [], layout.credentials, identity)
    if spec is not None and spec.shared_files and shared.unavailable() is None:
        shared.stage(layout, spec.shared_files)


def build_env(layout: Layout, identity: Identity, spec: SandboxSpec | None) -> dict[str, str]:
    """The environment of every exec, built from scratch: nothing of the scheduler's leaks."""
    extra = dict(spec.env) if spec else {}
    path = extra.pop("PATH", "/usr/local/bin:/usr/bin:/bin")
    env = {
        "HOME": str(layout.workdir),
        "USER": identity.name,
        "LOGNAME": identity.name,
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": str(layout.tmp),
        **extra,
        **(spec.credential_env(str(layout.credentials)) if spec else {}),
        "PATH": f"{layout.bin}:{path}",
        "AL_CREDENTIALS_PATH": str(layout.credentials),
        "AL_RUN_ID": layout.run_id,  # also the marker the /proc fallback finds processes by
    }
    return env

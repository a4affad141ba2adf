"""Gateway socket directories (``/tmp/al-gw-<project>-<pid>-<random>/``): left by a scheduler
killed with ``kill -9``, they are removed at the next start (those of live processes and other
users stay); their names cannot be squatted in advance by another user."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from llamaherd.engine import Engine, socket_prefix
from llamaherd.testing import OfflineProject


def _socket_dir(project: OfflineProject) -> Path:
    info = json.loads((project.root / ".al" / "scheduler.json").read_text())
    return Path(info["socket"]).parent


def test_a_killed_schedulers_socket_dir_is_removed_at_the_next_start(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    first = scheduler(project)
    left = _socket_dir(project)
    first.kill9()
    assert left.is_dir()  # nothing removed it: the process died at once
    prefix = socket_prefix(project.root).name
    assert left.name.startswith(f"{prefix}{first.proc.pid}-")
    # Beside it: one of a live process (this test) and one of another user (nobody).
    live = left.with_name(f"{prefix}{os.getpid()}")
    live.mkdir()
    foreign = left.with_name(f"{prefix}999999")
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    try:
        scheduler(project)
        now = _socket_dir(project)
        assert now != left and now.is_dir()
        assert not left.exists()
        assert live.is_dir() and foreign.is_dir()
    finally:
        live.rmdir()
        foreign.rmdir()


def test_socket_dir_names_cannot_be_squatted(tmp_path):
    """Another user creates, in advance, the names this process could serve its socket in (a
    pid's name, as another user once did for all 32,768 pids so `al start` refused to start):
    the scheduler starts anyway, in a fresh directory of its own that nobody else could
    have made."""
    project = OfflineProject(tmp_path / "proj").load()
    prefix = f"{socket_prefix(project.root)}{os.getpid()}"
    planted = [Path(prefix), *(Path(f"{prefix}-{n}") for n in ("0", "tmp", "aaaaaaaa"))]
    for path in planted:
        path.mkdir()
        os.chown(path, 65534, 65534)
    engine = Engine(project)
    try:
        engine.serve()
        directory = Path(engine.gateway_socket).parent
        info = directory.lstat()
        assert directory not in planted and directory.name.startswith(Path(prefix).name + "-")
        assert info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o755
        assert stat.S_ISSOCK(Path(engine.gateway_socket).lstat().st_mode)
    finally:
        engine.close()
        for path in planted:
            path.rmdir()
    assert not directory.exists()

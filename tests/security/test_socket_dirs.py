"""Gateway socket directories (``/tmp/al-gw-<project>-<pid>/``) left by a scheduler killed with
``kill -9`` are removed at the next start; those of live processes and other users stay."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llamaherd.engine import Engine, socket_prefix
from llamaherd.testing import OfflineProject
from llamaherd.types import LlamaherdError


def _socket_dir(project: OfflineProject) -> Path:
    info = json.loads((project.root / ".al" / "scheduler.json").read_text())
    return Path(info["socket"]).parent


def test_a_killed_schedulers_socket_dir_is_removed_at_the_next_start(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    first = scheduler(project)
    left = _socket_dir(project)
    first.kill9()
    assert left.is_dir()  # nothing removed it: the process died at once
    prefix = left.name.rsplit("-", 1)[0] + "-"
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


def test_a_socket_dir_planted_by_another_user_is_refused(tmp_path):
    """Someone else made the directory this process would serve its socket in (the name is
    predictable): it refuses to start rather than serve in a directory another user controls."""
    project = OfflineProject(tmp_path / "proj").load()
    planted = Path(f"{socket_prefix(project.root)}{os.getpid()}")
    planted.mkdir()
    os.chown(planted, 65534, 65534)
    engine = Engine(project)
    try:
        with pytest.raises(LlamaherdError, match="exists and is not ours"):
            engine.serve()
    finally:
        engine.close()
        planted.rmdir()

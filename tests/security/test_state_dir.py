"""``.al/`` is private to the scheduler's user: 0700, its files 0600, checked (and fixed) at start.

It holds every transcript, the scheduler's log and the control token; another local user (an
agent's sandbox user included) must not read it with ``sqlite3`` or ``cat``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from llamaherd.testing import OfflineProject

SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "echo hello"}}]

[[turns]]
text = "done"
"""


def _modes(state_dir: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(state_dir.stat().st_mode)}
    for path in state_dir.rglob("*"):
        if not path.is_symlink():
            found[str(path.relative_to(state_dir))] = stat.S_IMODE(path.stat().st_mode)
    return found


def _open_to_others(state_dir: Path) -> dict[str, str]:
    return {name: oct(mode) for name, mode in _modes(state_dir).items() if mode & 0o077}


def test_a_fresh_project_keeps_its_state_private_whatever_the_umask(tmp_path: Path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("greeter", "", SCRIPT)
    old = os.umask(0o022)  # the usual umask: new files 0644, directories 0755
    try:
        assert project.al("run", "greeter").returncode == 0
        started = scheduler(project)
        assert started.post("/control/run", {"agent": "greeter"}).ok
        project.wait_run(lambda runs: len(runs) == 2 and all(r.state == "done" for r in runs))
        state = project.root / ".al"
        names = set(_modes(state))
        assert {"work-queue.db", "work-queue.db-wal", "control-token"} <= names, names
        assert _open_to_others(state) == {}
    finally:
        os.umask(old)


def test_the_scheduler_makes_an_open_state_dir_private_at_start(tmp_path: Path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("greeter", "", SCRIPT)
    assert project.al("run", "greeter").returncode == 0
    state = project.root / ".al"
    (state / "scheduler.log").write_text("an old log\n")
    (state / "plugin-data").mkdir()
    (state / "plugin-data" / "cache.json").write_text("{}")
    for path in [state, *state.rglob("*")]:  # as an older version (or a umask of 0) left it
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert _open_to_others(state)

    started = scheduler(project)
    assert _open_to_others(state) == {}
    assert "made" in started.read_log() and "private" in started.read_log()


def test_detached_scheduler_log_and_pid_are_private(tmp_path: Path):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("greeter", "", SCRIPT)
    old = os.umask(0o022)
    try:
        assert project.al("start", "--detach").returncode == 0
        try:
            state = project.root / ".al"
            assert (state / "scheduler.log").exists() and (state / "scheduler.pid").exists()
            assert _open_to_others(state) == {}
        finally:
            assert project.al("stop").returncode == 0
    finally:
        os.umask(old)

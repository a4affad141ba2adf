"""Small things a user trips over (issue 30's nits): each says what went wrong in one line and
exits non-zero when it failed, and the scheduler says why it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject

# Root ignores file modes; without these capabilities it obeys them like any user.
AS_PLAIN_USER = (
    ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--inh-caps", "-all"]
    if os.geteuid() == 0
    else []
)


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_al_new_where_nothing_can_be_created_is_one_line(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "llamaherd", "new", "/proc/nope"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = one_line(result.stderr)
    assert "/proc/nope" in line and "cannot create the project" in line, line


def test_an_unreadable_skill_md_is_named_not_called_missing(project: OfflineProject):
    project.add_scripted_agent("locked", "", '[[turns]]\ntext = "done"\n')
    skill = project.root / "agents" / "locked" / "SKILL.md"
    skill.chmod(0o000)
    result = subprocess.run(
        [*AS_PLAIN_USER, sys.executable, "-m", "llamaherd", "--project", str(project.root),
         "run", "locked"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **project.env},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert "no such agent" not in line, line
    assert str(skill) in line and "cannot read" in line and "Permission denied" in line, line


def test_al_pause_with_a_wrong_token_fails_and_pauses_nothing(project: OfflineProject, scheduler):
    project.add_scripted_agent("worker", "", '[[turns]]\ntext = "done"\n')
    scheduler(project)
    token = project.root / ".al" / "control-token"
    right = token.read_text()
    token.write_text("not-the-token")
    refused = project.al("pause", "worker")
    assert refused.returncode == 1, refused
    assert "control token required" in one_line(refused.stderr)
    store = project.store()
    try:
        assert store.paused() == (False, set())
        token.write_text(right)
        assert project.al("pause", "worker").returncode == 0
        assert store.paused() == (False, {"worker"})
        assert project.al("resume", "worker").returncode == 0
        assert store.paused() == (False, set())
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_is_logged(project: OfflineProject, scheduler, kind: str):
    started = scheduler(project)
    started.proc.send_signal(getattr(signal, kind))
    assert started.proc.wait(60) == 0
    assert f"received {kind}: stopping" in started.read_log()

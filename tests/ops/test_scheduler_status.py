"""`al stat` and the control API say whether a scheduler is up, since when, its version, and
whether the config it loaded is the one on disk."""

from __future__ import annotations

import json
import re

import pytest

from llamaherd import __version__


@pytest.fixture
def scheduled(cron_project):
    cron_project.add_scripted_agent("tick", 'every = "1h"\n')
    return cron_project


def test_without_a_scheduler_stat_says_so_and_shows_no_next_fire(scheduled):
    result = scheduled.al("stat")
    assert result.returncode == 0, result.stderr
    assert "no scheduler is running" in result.stdout
    assert not re.search(r"\bin \d+[smhd]\b", result.stdout)  # no next fire
    data = json.loads(scheduled.al("stat", "--json").stdout)
    assert data["scheduler"] == {"running": False}


def test_with_a_scheduler_stat_shows_since_version_and_current_config(scheduled, scheduler):
    running = scheduler(scheduled)
    text = scheduled.al("stat").stdout
    assert "scheduler up since" in text and f"llamaherd {__version__}" in text
    assert "config current" in text
    assert re.search(r"\bin \d+[smhd]\b", text)  # the next fire is real now
    status = json.loads(scheduled.al("stat", "--json").stdout)["scheduler"]
    assert status["running"] is True and status["where"] == "this machine"
    assert status["pid"] == running.proc.pid and status["url"] == running.url
    assert status["version"] == __version__ and status["config_current"] is True
    assert status["since"] > 0

    for path in ("/control/health", "/control/stat"):
        served = running.get(path).json()["scheduler"]
        assert served["running"] is True and served["config_current"] is True
        assert served["since"] == status["since"] and served["version"] == __version__


def test_an_edit_is_loaded_and_the_config_is_current_again(scheduled, scheduler):
    """A running scheduler reloads an edit (tests/ops/test_live_reload.py has the rest)."""
    from llamaherd.testing import wait_until

    running = scheduler(scheduled)
    scheduled.write("agents/tick/SKILL.md", "---\nname: tick\ndescription: Changed.\n---\nNew.\n")

    def reloaded() -> dict:
        status = running.get("/control/health").json()["scheduler"]
        return status if status["reloaded_at"] and status["config_current"] else {}

    status = wait_until(reloaded, 10, what="the reload")
    assert status["config_errors"] == []
    assert "config current" in scheduled.al("stat").stdout

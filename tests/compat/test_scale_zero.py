"""``scale = 0`` disables an agent, as in Action Llama: nothing fires, queues or runs; ``al run``
says so at once and exits non-zero; ``al stat`` shows it ``disabled``. And the sum of agents'
scales above the project's ``scale`` is a warning, as Action Llama prints it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject, wait_until

EVERY_SECOND = 'schedule = "* * * * * *"\n'


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=60)
    project.add_scripted_agent("spare", "scale = 0\n" + EVERY_SECOND)
    project.add_scripted_agent("busy", EVERY_SECOND)
    return project


def test_al_run_refuses_at_once_in_the_foreground(project):
    result = project.al("run", "spare", timeout=20)
    assert result.returncode != 0
    assert "agent 'spare' is disabled (scale = 0 in agents/spare/config.toml)" in result.stderr
    assert project.store().runs(agent="spare") == []


def test_nothing_fires_queues_or_runs_under_a_scheduler(project, scheduler):
    sched = scheduler(project)
    # The other agent with the same every-second schedule runs; the disabled one never.
    project.wait_run(lambda runs: len([r for r in runs if r.agent == "busy"]) >= 2)
    refused = project.al("run", "spare", timeout=20)
    assert refused.returncode != 0 and "is disabled (scale = 0" in refused.stderr
    assert sched.post("/control/run", {"agent": "spare"}).status_code == 409
    store = project.store()
    assert store.runs(agent="spare") == [] and store.queue_depth().get("spare", 0) == 0
    rows = {row["agent"]: row for row in json.loads(project.al("stat", "--json").stdout)["agents"]}
    assert rows["spare"]["state"] == "disabled" and rows["spare"]["next_fire"] is None
    assert "agent spare: disabled (scale = 0)" in wait_until(
        lambda: "disabled (scale = 0)" in sched.read_log() and sched.read_log()
    )


def test_scales_above_the_project_cap_are_a_warning(tmp_path):
    project = OfflineProject(tmp_path / "proj", "scale = 3\n", timeout=60)
    project.add_scripted_agent("a", "scale = 2\n")
    project.add_scripted_agent("b", "scale = 2\n")
    result = project.al("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "warning: config.toml: scale: agents' scales add up to 4, above the project's scale 3: "
        "agents will be throttled (at most 3 runs at once)"
    ) in result.stdout + result.stderr

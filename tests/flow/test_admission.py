"""A plugin's admission check (``register_admission_checks``) holds an agent's queued runs in a
real scheduler, `al stat` says why, and they run once it lets go."""

from __future__ import annotations

import json
import textwrap

from llamaherd.testing import wait_until

PLUGIN = textwrap.dedent(
    """
    from llamaherd import hookimpl


    class MaintenanceWindow:
        name = "maintenance"
        description = "Holds every agent while the project has a MAINTENANCE file."

        def hold(self, agent, store, now):
            if (agent.project.root / "MAINTENANCE").exists():
                return "maintenance window (remove MAINTENANCE to resume)"
            return None


    @hookimpl
    def register_admission_checks(register):
        register(MaintenanceWindow())
    """
)


def test_an_admission_check_holds_queued_runs_until_it_lets_go(project, start, runs_of, tmp_path):
    (tmp_path / "maintenance_plugin.py").write_text(PLUGIN)
    project.env["PYTHONPATH"] = str(tmp_path)
    project.env["AL_PLUGINS"] = ",".join(
        filter(None, [project.env.get("AL_PLUGINS"), "maintenance_plugin"])
    )
    project.add_scripted_agent("worker")
    flag = project.root / "MAINTENANCE"
    flag.touch()
    scheduler = start(project)
    for _ in range(2):
        assert scheduler.post("/control/run", {"agent": "worker"}).status_code == 202
    stat = json.loads(project.al("stat", "worker", "--json", check=True).stdout)
    [row] = stat["agents"]
    assert row["queued"] == 2
    assert row["held"] == "maintenance window (remove MAINTENANCE to resume) (maintenance)"
    assert runs_of(project) == []
    flag.unlink()
    wait_until(lambda: [r.state for r in runs_of(project)] == ["done", "done"])


def test_an_agent_with_a_broken_flow_is_held_and_runs_by_hand_without_it(project, start, runs_of):
    project.add_scripted_agent("broken", '[flow]\nkey = "pull_request."\n')
    project.add_scripted_agent("fine")
    scheduler = start(project)
    row = json.loads(project.al("stat", "broken", "--json", check=True).stdout)["agents"][0]
    assert row["state"] == "error"
    # A run by hand sets it idle (as for any agent in error); the dispatcher claims it plainly.
    assert scheduler.post("/control/run", {"agent": "broken"}).status_code == 202
    assert scheduler.post("/control/run", {"agent": "fine"}).status_code == 202
    wait_until(lambda: sorted(r.state for r in runs_of(project)) == ["done", "done"])

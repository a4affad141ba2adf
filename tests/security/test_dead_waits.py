"""A blocked ``al-wait`` ends with its run and with its own kill: a later event is not
swallowed by it, but queues a normal run (issue 18: "an acknowledged webhook is swallowed by a
dead wait")."""

from __future__ import annotations

import json

from llamaherd.testing import OfflineProject, wait_until

# The agent leaves an al-wait behind in the background and ends.
LEAVER = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
setsid -f al-wait '{"type": "agent", "from": "pinger"}' 600 > /dev/null 2>&1 < /dev/null
sleep 1; echo left  # time for the al-wait to reach the gateway (without it: no bug)
'''}}]

[[turns]]
text = "done"
"""
# Kills its own al-wait and goes on working.
KILLER = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
al-wait '{"type": "agent", "from": "pinger"}' 600 > /dev/null 2>&1 & pid=$!
sleep 1; kill $pid; wait $pid; al-status "wait killed"; sleep 120
'''}}]

[[turns]]
text = "done"
"""
PINGER = """
[[turns]]
tool_calls = [{name = "call_agent", arguments = {agent = "%s", context = "wake up"}}]

[[turns]]
text = "pinged"
"""


def _runs(project: OfflineProject, agent: str, state: str = "done") -> list:
    store = project.store()
    try:
        return [r for r in store.runs(limit=200) if r.agent == agent and r.state == state]
    finally:
        store.close()


def test_a_wait_left_by_an_ended_run_does_not_swallow_the_next_event(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("leaver", "", LEAVER)
    project.add_scripted_agent("pinger", "", PINGER % "leaver")
    scheduler(project)
    assert project.al("run", "leaver").returncode == 0
    assert len(_runs(project, "leaver")) == 1

    assert project.al("run", "pinger").returncode == 0
    # The call is a normal run of leaver, not a "resume" of the run that ended.
    wait_until(lambda: len(_runs(project, "leaver")) == 2, 60, what="a second leaver run")


def test_a_killed_al_wait_gives_up_its_event(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("killer", "", KILLER)
    project.add_scripted_agent("pinger", "", PINGER % "killer")
    scheduler(project)
    assert project.al("run", "killer", "--no-follow").returncode == 0
    running = wait_until(
        lambda: [r for r in _runs(project, "killer", "running") if r.status == "wait killed"],
        60,
        what="killer killed its al-wait",
    )
    assert project.al("run", "pinger").returncode == 0
    logs = project.al("logs", "pinger", "--json").stdout
    calls = [json.loads(line)["data"] for line in logs.splitlines()]
    outputs = [c["output"] for c in calls if c.get("tool") == "call_agent"]
    # The call queued a run of killer: the killed al-wait did not take it.
    assert outputs and "delivered_to" not in outputs[0], outputs
    assert project.al("kill", running[0].id).returncode == 0

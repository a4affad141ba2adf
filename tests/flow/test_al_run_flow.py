"""`al run` of a trigger that flow control skips, drops, merges or that a budget holds: it says
so and exits at once with its documented code (4: not run, 5: held), or follows the run the
trigger went into; the control API's answer says the same. Real clock, real scheduler."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from llamaherd.testing import wait_until

NOT_RUN, HELD = 4, 5
GATED = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "while [ ! -e '{{ payload.gate }}' ]; do sleep 0.05; done" } }]

[[turns]]
text = "done"
"""
SKIPPING = '[flow]\nsingleton = { mode = "skip" }\n'
ONE_CALL = """
[[turns]]
usage = { input = 1000, output = 500 }
text = "done"
"""


@pytest.fixture
def project(tmp_path, credentials, kit):
    """On the real clock (the flow tests' default project has a fake one)."""
    return kit.flow_project(tmp_path / "project", None, credentials)


def timed_al(project, *args):
    began = time.monotonic()
    result = project.al(*args)
    return result, time.monotonic() - began


def test_a_skipped_trigger_says_so_and_exits_4_at_once(project, start, runs_of, tmp_path):
    project.add_scripted_agent("reviewer", SKIPPING, script=GATED)
    scheduler = start(project)
    gate = tmp_path / "gate"
    busy = scheduler.post("/control/run", {"agent": "reviewer", "payload": {"gate": str(gate)}})
    assert busy.status_code == 202
    [run] = wait_until(lambda: runs_of(project) or None, what="the busy run")
    answer = scheduler.post("/control/run", {"agent": "reviewer"})
    assert answer.status_code == 200, "nothing queued"
    assert answer.json()["items"] == [None]
    assert answer.json()["flow"][0].startswith(
        f"skipped: singleton skip: key '' is busy (run {run.id})"
    )
    for args in (("run", "reviewer"), ("run", "reviewer", "--no-follow")):
        result, took = timed_al(project, *args)
        assert result.returncode == NOT_RUN, result.stderr
        assert (
            f"not run: reviewer's flow control: skipped: singleton skip: key '' is busy (run {run.id})"
            in result.stderr
        )
        assert took < 5, took
    gate.touch()
    wait_until(lambda: runs_of(project)[0].state == "done")
    assert len(runs_of(project)) == 1


def test_a_dropped_trigger_exits_4_with_or_without_a_scheduler(project, start, runs_of):
    project.add_scripted_agent("notifier", '[flow]\nrateLimit = { limit = 1, period = "1h" }\n')
    assert project.al("run", "notifier").returncode == 0, "the first, in the foreground"
    result = project.al("run", "notifier")
    assert result.returncode == NOT_RUN
    assert "not run: notifier's flow control: dropped: rate limit: 1 per 3600 s" in result.stderr
    start(project)
    result = project.al("run", "notifier")
    assert result.returncode == NOT_RUN, result.stderr
    assert "dropped: rate limit" in result.stderr
    assert len(runs_of(project)) == 1


def test_a_trigger_held_by_a_budget_exits_5_and_stays_queued(project, start, runs_of):
    project.add_scripted_agent("spender", "[budget]\ndaily = { tokens = 1000 }\n", script=ONE_CALL)
    scheduler = start(project)
    assert project.al("run", "spender").returncode == 0, "1,500 tokens: over for today"
    answer = scheduler.post("/control/run", {"agent": "spender"}).json()
    assert answer["held"].startswith("over budget: agent spender spent 1,500 of 1,000 tokens daily")
    result, took = timed_al(project, "run", "spender")
    assert result.returncode == HELD, result.stderr
    assert "held: over budget: agent spender spent 1,500 of 1,000 tokens daily" in result.stderr
    assert "stays queued" in result.stderr
    assert took < 3, took
    store = project.store()
    try:
        assert store.queue_depth() == {"spender": 2}, "both held triggers kept"
    finally:
        store.close()
    scheduler.stop()
    result = project.al("run", "spender")  # in the foreground: nothing would start it later
    assert result.returncode == HELD
    assert "not queued" in result.stderr
    store = project.store()
    try:
        assert store.queue_depth() == {"spender": 2}
    finally:
        store.close()


def test_merged_triggers_follow_the_run_they_went_into(project, start, runs_of):
    # A window long enough for a second `al run` to start on a loaded machine.
    project.add_scripted_agent("builder", '[flow]\ndebounce = { period = "6s" }\n')
    project.add_scripted_agent("collector", '[flow]\nbatch = { maxSize = 2, timeout = "1m" }\n')
    start(project)
    for agent, said in (("builder", "debounced: merged"), ("collector", None)):
        first = al_in_background(project, "run", agent)
        wait_until(lambda a=agent: queued(project, a), what=f"{agent}'s first trigger queued")
        second = project.al("run", agent)
        assert second.returncode == 0, second.stderr
        if said:
            assert said in second.stderr
        assert first.wait(30) == 0
        [run] = runs_of(project, agent)
        assert run.id in second.stdout + second.stderr


def al_in_background(project, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args]
    env = {**os.environ, **project.env}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def queued(project, agent: str) -> bool:
    store = project.store()
    try:
        return store.queue_depth().get(agent, 0) == 1
    finally:
        store.close()

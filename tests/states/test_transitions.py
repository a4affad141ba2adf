"""Every transition of the agent state model, through real processes (issue 23, items 1-7):
`al start` subprocesses on offline projects, the scripted provider, the host-user runtime as
the current user, and a local model server with a slow reply."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import requests

from llamaherd.testing import OfflineProject, chat_reply, source_distribution, wait_until

from .conftest import events_of
from .helpers import (
    events,
    one_run,
    openai_model,
    post_webhook,
    project_with_hooks,
    runs_of,
    tool_results,
)

LOOP = """
[[turns]]
loop = true
tool_calls = [{name = "bash", arguments = {command = "echo turn {{ turn }}"}}]
"""
CONTRIB = Path(__file__).resolve().parents[2] / "contrib"


def _suspended(store, agent: str, turns: int):
    """The agent's waiting run once it is suspended after ``turns`` tool calls."""

    def check():
        for run in runs_of(store, agent, "waiting"):
            calls = events(store, run.id, "tool_call")
            if store.agent_state(agent) == "suspended" and len(calls) == turns:
                return run
        return None

    return wait_until(check, what=f"{agent} suspended after {turns} turns")


# ------------------------------------------------------------------ 1. approval


def test_an_approved_run_resumes_at_once_ahead_of_the_queue(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    # The suspension must outlast the al commands below on a loaded machine: none expires here.
    project.add_scripted_agent("looper", "maxTurns = 1\nsuspendTimeout = 600\n", LOOP)
    scheduler(project)
    store = project.store()
    assert project.al("run", "looper", "--no-follow", check=True).returncode == 0
    first = _suspended(store, "looper", 1)
    project.al("run", "looper", "--no-follow", check=True)  # waits behind the suspended run
    assert store.queue_depth("looper")["looper"] == 1

    assert f"run {first.id} approved" in project.al("approve", first.id, check=True).stdout
    again = _suspended(store, "looper", 2)  # the same run: one more turn, suspended again
    assert again.id == first.id and again.wait_deadline > first.wait_deadline
    assert [r.id for r in runs_of(store, "looper")] == [first.id]
    assert store.queue_depth("looper")["looper"] == 1

    # The owner lets the agent go while its run is suspended: that run still holds the
    # agent's only slot, so the queued item does not start; approved, it resumes first again.
    project.al("state", "looper", "idle", check=True)
    project.al("approve", first.id, check=True)
    _suspended(store, "looper", 3)
    assert [r.id for r in runs_of(store, "looper")] == [first.id]
    outputs = [c["output"] for c in events(store, first.id, "tool_call")]
    assert outputs == ["turn 1", "turn 2", "turn 3"]
    changes = [e["data"]["state"] for e in events_of(store, "looper", "state")]
    assert changes == ["suspended", "idle", "suspended", "idle", "suspended"]

    assert "denied" in project.al("deny", first.id, check=True).stdout
    assert store.get_run(first.id).state == "killed" and store.agent_state("looper") == "off"
    assert [r.id for r in runs_of(store, "looper")] == [first.id]


# ------------------------------------------------------------------ 2. own state ends the loop


def test_an_agents_own_state_change_ends_its_run(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    for name, state in (("quitter", "off"), ("rester", "idle"), ("napper", "hibernate")):
        project.add_scripted_agent(
            name,
            script=f"""
            [[turns]]
            tool_calls = [
              {{name = "set_state", arguments = {{state = "{state}", reason = "work complete"}}}},
              {{name = "bash", arguments = {{command = "touch {tmp_path}/{name}-same-turn"}}}},
            ]
            [[turns]]
            tool_calls = [{{name = "bash", arguments = {{command = "touch {tmp_path}/{name}-next"}}}}]
            [[turns]]
            text = "never"
            """,
        )
    sched = scheduler(project)
    store = project.store()
    for name in ("quitter", "rester", "napper"):
        assert sched.post("/control/run", {"agent": name}).status_code == 202

    quitter = one_run(store, "quitter", "done")
    assert quitter.reason == "the agent set its state to off"
    assert not (tmp_path / "quitter-same-turn").exists(), "off ends the run at once"
    assert "not run" in tool_results(quitter)[1]
    assert store.agent_state("quitter") == "off"

    for name, state in (("rester", "idle"), ("napper", "hibernate")):
        run = one_run(store, name, "done")
        assert run.reason == f"the agent set its state to {state}"
        assert (tmp_path / f"{name}-same-turn").exists(), "the turn's tool calls all run"
        assert store.agent_state(name) == state
        cause = events_of(store, name, "state")[-1]["data"]["cause"]
        assert cause == f"set by its run {run.id}: work complete"
        assert [c["tool"] for c in events(store, run.id, "tool_call")] == ["set_state", "bash"]
    for name in ("quitter", "rester", "napper"):
        assert not (tmp_path / f"{name}-next").exists(), "no model turn after the state change"


# ------------------------------------------------------------------ 3. off aborts the request


def test_off_aborts_the_model_request_in_flight(tmp_path, scheduler, model_server):
    model_server.reply(200, chat_reply("far too late"), delay=30)
    project = OfflineProject(tmp_path / "proj")
    openai_model(project, model_server.url)
    project.add_scripted_agent("thinker", 'models = ["fake"]\n')
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "thinker"}).status_code == 202
    wait_until(lambda: model_server.requests, what="the model request")
    run = one_run(store, "thinker", "running")

    switched = time.monotonic()
    assert sched.post("/agents/thinker/state", {"state": "off"}).json()["killed"] == [run.id]
    closed = wait_until(lambda: model_server.requests[0].get("closed_after"), timeout=5)
    assert time.monotonic() - switched < 5 and closed < 10, "the connection is closed at once"
    final = wait_until(lambda: [e for e in events(store, run.id, "model_call")], timeout=5)[0]
    assert final["error_class"] == "Aborted" and final["duration_ms"] < 10_000
    assert store.get_run(run.id).state == "killed"
    assert len(model_server.requests) == 1, "no retry of an aborted call"


# ------------------------------------------------------------------ 4. al stop requeues

SLEEPER = """
[[turns]]
tool_calls = [{{name = "bash", arguments = {{command = "mkdir {marks}/$AL_AGENT && sleep 60; echo $AL_AGENT"}}}}]
[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "served"}}}}]
[[turns]]
text = "done"
"""


def test_al_stop_requeues_a_cut_off_run_with_the_recovery_notice(tmp_path, scheduler):
    marks = tmp_path / "marks"
    marks.mkdir()
    project = project_with_hooks(tmp_path / "proj")
    project.add_scripted_agent(
        "hooked", '[[webhooks]]\nsource = "hooks"\n', SLEEPER.format(marks=marks)
    )
    project.add_scripted_agent("callee", script=SLEEPER.format(marks=marks))
    project.add_scripted_agent(
        "caller",
        script="""
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "callee", context = "go"}}]
        [[turns]]
        text = "called"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    assert post_webhook(sched.url, {"event": "deploy"}).json()["queued"] == ["hooked"]
    assert sched.post("/control/run", {"agent": "caller"}).status_code == 202
    caller = one_run(store, "caller", "done")
    wait_until(lambda: (marks / "hooked").exists() and (marks / "callee").exists())
    cut = {name: one_run(store, name, "running") for name in ("hooked", "callee")}

    assert project.al("stop", check=True, timeout=60).returncode == 0  # grace: 5 s
    for run in cut.values():
        final = store.get_run(run.id)
        assert (final.state, final.reason) == ("error", "interrupted")
    assert store.queue_depth("hooked")["hooked"] == 1 and store.queue_depth("callee")["callee"] == 1
    (call_id,) = store.call_ids(caller.id)
    assert store.get_call(call_id)["state"] == "pending", "the call is served after the restart"

    scheduler(project)
    for name, run in cut.items():
        again = one_run(store, name, "done")
        assert again.id != run.id and again.trigger["recovery"]["interrupted_run"] == run.id
        user = next(m for m in again.transcript if m.get("role") == "user")["content"]
        assert "<recovery-notice>" in user and f"Interrupted run: {run.id}" in user
    assert store.get_call(call_id)["state"] == "done"
    assert store.get_call(call_id)["return_value"] == "served"


# ------------------------------------------------------------------ 5. hibernate = timers only


def test_a_hibernating_agent_refuses_manual_runs_unless_woken(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("sleepy", script='[[turns]]\ntext = "awake"\n')
    sched = scheduler(project)
    store = project.store()
    project.al("pause", "sleepy", check=True)
    for _ in range(2):
        assert sched.post("/control/run", {"agent": "sleepy"}).status_code == 202
    result = project.al("state", "sleepy", "hibernate", check=True)
    assert "dropped 2 queued trigger(s)" in result.stdout
    assert [e["data"]["count"] for e in events_of(store, "sleepy", "trigger.dropped")] == [2]
    project.al("resume", "sleepy", check=True)

    refused = project.al("run", "sleepy")
    assert refused.returncode == 1  # the agent's state refuses it: an operation failure
    assert "hibernating" in refused.stderr and "`al state sleepy idle`" in refused.stderr
    assert events_of(store, "sleepy", "trigger.refused")[-1]["data"]["kind"] == "manual"
    assert not runs_of(store, "sleepy")

    woken = project.al("run", "sleepy", "--wake", check=True)
    assert "awake" in woken.stdout
    assert store.agent_state("sleepy") == "idle"
    assert "woken from hibernate" in events_of(store, "sleepy", "state")[-1]["data"]["cause"]


def test_a_third_party_trigger_is_gated_like_webhooks(tmp_path, scheduler):
    watched = tmp_path / "watched.log"
    watched.write_text("")
    env = source_distribution(tmp_path / "site", CONTRIB / "example-trigger")
    project = OfflineProject(tmp_path / "proj", env=env)
    project.add_scripted_agent(
        "watcher",
        f'[watch]\npaths = ["{watched}"]\ninterval = 0.1\n',
        '[[turns]]\ntext = "saw it"\n',
    )
    scheduler(project)
    store = project.store()
    project.al("state", "watcher", "hibernate", check=True)
    watched.write_text("one\n")
    refused = wait_until(lambda: events_of(store, "watcher", "trigger.refused"))
    assert refused[0]["data"]["kind"] == "file_watch"
    assert "hibernating" in refused[0]["data"]["reason"]
    assert store.queue_depth("watcher")["watcher"] == 0 and not runs_of(store, "watcher")

    project.al("state", "watcher", "idle", check=True)
    watched.write_text("one\ntwo\n")
    assert one_run(store, "watcher", "done").trigger_kind == "file_watch"


# ------------------------------------------------------------------ 6. POST /agents/:id/state


def test_post_agent_state_honours_every_state_it_can(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("target", script='[[turns]]\ntext = "ran"\n')
    sched = scheduler(project)
    store = project.store()

    def post(state: str, **extra) -> requests.Response:
        return sched.post("/agents/target/state", {"state": state, **extra})

    assert post("hibernate").json()["state"] == "hibernate"
    busy = post("active")
    assert busy.status_code == 409 and "hibernating" in busy.json()["error"]
    answer = post("active", wake=True).json()  # run now, waking it
    assert answer["previous"] == "hibernate" and answer["queued"]
    assert one_run(store, "target", "done").item_id == answer["queued"]
    assert store.agent_state("target") == "idle"

    assert post("suspended").json()["state"] == "suspended"  # hold: queue, run nothing
    assert sched.post("/control/run", {"agent": "target"}).status_code == 202
    stat = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert (stat["state"], stat["queued"]) == ("suspended", 1)
    assert post("idle").json()["previous"] == "suspended"
    wait_until(lambda: len(runs_of(store, "target", "done")) == 2)

    for state, words in (("error", "only a structural failure"), ("paused", "al pause target")):
        refused = post(state)
        assert refused.status_code == 409 and words in refused.json()["error"]
    assert post("off").json()["state"] == "off"
    refused = post("active")
    assert refused.status_code == 409 and "is off" in refused.json()["error"]
    assert post("sleeping").status_code == 400
    assert (
        requests.post(sched.url + "/agents/target/state", json={"state": "idle"}).status_code == 401
    )
    assert store.agent_state("target") == "off"


# ------------------------------------------------------------------ 7. the `state` command


def test_the_state_command_sets_the_state_when_its_tool_call_ends(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    script = """
    [[turns]]
    tool_calls = [{name = "bash", arguments = {command = "state; state hibernate 'quiet now'; echo rc=$?; state; sleep 0.2; state"}}]
    [[turns]]
    text = "never asked"
    """
    project.add_scripted_agent("shy", script=script)
    project.add_scripted_agent("locked", "selfStates = []\n", script)
    sched = scheduler(project)
    store = project.store()
    for name in ("shy", "locked"):
        assert sched.post("/control/run", {"agent": name}).status_code == 202

    shy = one_run(store, "shy", "done")
    lines = tool_results(shy)[0].splitlines()
    # Bare `state` prints the state; the change waits for the end of the bash call.
    assert lines[0] == "idle" and json.loads(lines[1])["ok"] is True
    assert lines[2:] == ["rc=0", "idle", "idle"]
    assert store.agent_state("shy") == "hibernate" and shy.reason.endswith("hibernate")
    assert len([m for m in shy.transcript if m["role"] == "assistant"]) == 1

    locked = one_run(store, "locked", "done")
    lines = tool_results(locked)[0].splitlines()
    assert "may not set its state" in json.loads(lines[1])["error"]
    assert lines[2:] == ["rc=126", "idle", "idle"]
    assert store.agent_state("locked") == "idle" and locked.reason is None


def test_state_off_in_a_pre_hook_ends_the_run_before_the_session(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent(
        "hooked",
        '[hooks]\npre = ["state off nothing to do", "echo next hook"]\n',
        '[[turns]]\ntext = "never"\n',
    )
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "hooked"}).status_code == 202
    run = one_run(store, "hooked", "done")
    assert run.reason == "the agent set its state to off"
    assert [h["command"] for h in events(store, run.id, "hook")] == ["state off nothing to do"]
    assert not events(store, run.id, "model_call")
    assert store.agent_state("hooked") == "off"


def test_a_captured_state_command_is_a_query_not_a_change(tmp_path, scheduler):
    """``x=$(state off)``, a pipe or a redirect: the output never reaches the tool result, so
    the command only reads the state (issue 33.10); in a hook the same."""
    project = OfflineProject(tmp_path / "proj")
    command = (
        'x=$(state off); echo "x=$x"; state hibernate | cat; state off > out.txt; '
        "cat out.txt; state"
    )
    script = f"""
    [[turns]]
    tool_calls = [{{name = "bash", arguments = {{command = '{command}'}}}}]
    [[turns]]
    text = "still on"
    """
    project.add_scripted_agent(
        "curious", '[hooks]\npre = ["echo hook=$(state off)"]\n', textwrap.dedent(script)
    )
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "curious"}).status_code == 202
    run = one_run(store, "curious", "done")
    assert [h["output"].strip() for h in events(store, run.id, "hook")] == [
        "state: output captured, so `state off` only reads the state and changes nothing; to "
        "change it, run `state off` with its output shown\nhook=idle"
    ]
    lines = tool_results(run)[0].splitlines()
    assert [line for line in lines if not line.startswith("state: output captured")] == [
        "x=idle",
        "idle",
        "idle",
        "idle",
    ]
    assert store.agent_state("curious") == "idle" and run.reason is None
    assert len([m for m in run.transcript if m["role"] == "assistant"]) == 2

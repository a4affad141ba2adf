"""Failures told apart, per-agent model keys, wait and call bookkeeping (issue 23, items
10-12), through real `al start` processes, a local model server and real webhooks."""

from __future__ import annotations

import json

from llamaherd.credentials import CredentialStore
from llamaherd.testing import OfflineProject, chat_reply, wait_until

from .helpers import (
    events,
    one_run,
    openai_model,
    post_webhook,
    project_with_hooks,
    runs_of,
    tool_results,
)

# ------------------------------------------------------------------ 10. operational vs structural


def test_provider_errors_and_turn_errors_are_told_apart_and_readable(
    tmp_path, scheduler, model_server
):
    project = OfflineProject(tmp_path / "proj")
    openai_model(project, model_server.url)
    project.add_scripted_agent("flaky", 'models = ["fake"]\n')
    project.add_scripted_agent("other", script='[[turns]]\ntext = "mine"\n')
    sched = scheduler(project, env={"AL_RETRY_BASE_DELAY": "0.01"})
    store = project.store()

    model_server.reply(503, {"error": {"type": "overloaded", "message": "try again"}})
    model_server.reply(200, chat_reply("fine after all"))
    assert sched.post("/control/run", {"agent": "flaky"}).status_code == 202
    first = one_run(store, "flaky", "done")
    (warning,) = events(store, first.id, "provider_error")
    assert (warning["level"], warning["origin"], warning["event"]) == (
        "warn",
        "executor",
        "provider_error",
    )
    assert not events(store, first.id, "turn_error")

    model_server.reply(400, {"error": {"type": "invalid_request", "message": "bad tools"}})
    assert sched.post("/control/run", {"agent": "flaky"}).status_code == 202
    second = one_run(store, "flaky", "error")
    (failure,) = events(store, second.id, "turn_error")
    assert (failure["level"], failure["origin"], failure["event"]) == (
        "error",
        "executor",
        "turn_error",
    )
    assert failure["error_class"] == "Fatal" and "bad tools" in failure["message"]
    assert not events(store, second.id, "provider_error")
    assert store.agent_state("flaky") == "idle", "a failed turn is no structural agent failure"

    assert sched.post("/control/run", {"agent": "other"}).status_code == 202
    foreign = one_run(store, "other", "done")
    model_server.reply(
        200,
        chat_reply(
            tool_calls=[
                ("bash", {"command": "al-events"}),
                ("recent_events", {"level": "warn"}),
                ("bash", {"command": f"al-events --run {foreign.id}"}),
                ("bash", {"command": f"al-events --run {first.id} --level info --limit 3"}),
            ]
        ),
    )
    model_server.reply(200, chat_reply("noted"))
    assert sched.post("/control/run", {"agent": "flaky"}).status_code == 202
    third = wait_until(lambda: [r for r in runs_of(store, "flaky", "done") if r.id != first.id])[0]
    shell, tool, refused, info = tool_results(third)
    for answer in (json.loads(shell), json.loads(tool)):
        seen = [(e["run"], e["event"], e["level"]) for e in answer["events"]]
        assert seen == [
            (first.id, "provider_error", "warn"),
            (second.id, "turn_error", "error"),
        ]
    assert "no run" in json.loads(refused.splitlines()[0])["error"] and "[exit code 1]" in refused
    assert [e["run"] for e in json.loads(info.splitlines()[0])["events"]] == [first.id] * 3


# ------------------------------------------------------------------ 11. per-agent model keys


def test_an_agent_uses_its_own_model_key_else_the_projects(tmp_path, scheduler, model_server):
    creds = CredentialStore(tmp_path / "creds")
    creds.write("openai_key", "default", {"token": "project-key-0001"})
    creds.write("openai_key", "team-a", {"token": "team-a-key-0002"})
    model_server.repeat_last = True
    model_server.reply(200, chat_reply("done"))
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds")
    openai_model(project, model_server.url)
    project.add_scripted_agent("own", 'models = ["fake"]\ncredentials = ["openai_key:team-a"]\n')
    project.add_scripted_agent("shared", 'models = ["fake"]\n')
    sched = scheduler(project)
    store = project.store()
    keys = []
    for agent in ("own", "shared"):
        assert sched.post("/control/run", {"agent": agent}).status_code == 202
        one_run(store, agent, "done")
        keys.append(model_server.requests[-1]["headers"]["authorization"])
    assert keys == ["Bearer team-a-key-0002", "Bearer project-key-0001"]
    for agent in ("own", "shared"):
        run = one_run(store, agent, "done")
        assert "key-000" not in json.dumps(run.transcript) + json.dumps(store.events(run.id))


# ------------------------------------------------------------------ 12. wait and call bookkeeping

WAITER = """
[[turns]]
tool_calls = [{{name = "wait_for_trigger", arguments = {{filter = {{type = "webhooks", "{key}" = "prod"}}, timeout = "60s"}}}}]
[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]
[[turns]]
text = "deployed"
"""


def test_a_wait_filters_dotted_key_matches_the_payload(tmp_path, scheduler):
    project = project_with_hooks(tmp_path / "proj")
    project.add_scripted_agent("bare", script=WAITER.format(key="deployment.environment"))
    project.add_scripted_agent(
        "prefixed", script=WAITER.format(key="payload.deployment.environment")
    )
    sched = scheduler(project)
    store = project.store()
    for agent in ("bare", "prefixed"):
        assert sched.post("/control/run", {"agent": agent}).status_code == 202
        one_run(store, agent, "waiting")
    staging = post_webhook(
        sched.url, {"event": "deployment", "deployment": {"environment": "staging"}}
    )
    assert staging.status_code == 202 and not staging.json().get("resumed")
    prod = post_webhook(sched.url, {"event": "deployment", "deployment": {"environment": "prod"}})
    assert prod.status_code == 202
    for agent in ("bare", "prefixed"):
        value = json.loads(one_run(store, agent, "done").return_value)
        assert value["payload"]["payload"]["deployment"]["environment"] == "prod"


def test_call_ids_are_per_run(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent(
        "worker",
        script='[[turns]]\ntool_calls = [{name = "return_value", arguments = {value = '
        '"did {{ payload.context }}"}}]\n[[turns]]\ntext = "ok"\n',
    )
    calls = "al-subagent worker first; al-subagent worker second; al-subagent-wait 1 30; "
    calls += "al-subagent-check 2; al-subagent-check 3"
    for name in ("early", "caller"):
        project.add_scripted_agent(
            name,
            script=f"""
            [[turns]]
            tool_calls = [{{name = "bash", arguments = {{command = "{calls}"}}}}]
            [[turns]]
            text = "called"
            """,
        )
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "early"}).status_code == 202
    early = one_run(store, "early", "done")
    assert sched.post("/control/run", {"agent": "caller"}).status_code == 202
    caller = one_run(store, "caller", "done")
    assert store.call_ids(caller.id) != [1, 2], "the store's own ids are global"
    for run in (early, caller):
        made, again, waited, checked, unknown = tool_results(run)[0].splitlines()[:5]
        assert json.loads(made)["call_id"] == 1 and json.loads(again)["call_id"] == 2
        assert json.loads(waited)["return_value"] == "did first"
        assert json.loads(checked)["call_id"] == 2 and json.loads(checked)["agent"] == "worker"
        assert json.loads(unknown)["error"] == "no call 3 made by this run (it made 2)"

"""Runs through a real `al start` scheduler process: calls, locks, waits, kill, restart."""

from __future__ import annotations

import json

WAITER = """
    [[turns]]
    tool_calls = [{name = "wait_for_trigger", arguments = {filter = {type = "agent", from = "pinger"}, timeout = "%s"}}]
    [[turns]]
    tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
    [[turns]]
    text = "done"
"""
PINGER = """
    [[turns]]
    tool_calls = [{name = "call_agent", arguments = {agent = "waiter", context = "wake up"}}]
    [[turns]]
    text = "pinged"
"""


def one(runs, agent, state=None):
    return next((r for r in runs if r.agent == agent and (state is None or r.state == state)), None)


def test_call_agent_and_check_call(project, scheduler):
    project.add_scripted_agent(
        "caller",
        script="""
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "adder", context = "2+3"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-subagent-wait 1 30 >/dev/null; echo waited"}}]
        [[turns]]
        tool_calls = [{name = "check_call", arguments = {call_id = 1}}]
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    project.add_scripted_agent(
        "adder",
        script="""
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "5 for {{ payload.context }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    scheduler(project)
    result = project.al("run", "caller")
    assert result.returncode == 0, result.stdout + result.stderr
    value = json.loads(json.loads(result.stdout.split("return value: ")[1].splitlines()[0]))
    assert value["state"] == "done" and value["return_value"] == "5 for 2+3"


def test_locks_contend_between_hook_and_model_and_tokens_are_per_run(project, scheduler):
    project.add_scripted_agent(
        "holder",
        script="""
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 4"}}]
        [[turns]]
        text = "done"
    """,
        config='[hooks]\npre = ["rlock res://shared"]\n',
    )
    project.add_scripted_agent(
        "other",
        script="""
        [[turns]]
        tool_calls = [{name = "acquire_lock", arguments = {uri = "res://shared"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "AL_RUN_ID={{ payload.holder }} runlock res://shared; echo rc=$?"}}]
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    scheduler(project)
    assert project.al("run", "holder", "--no-follow").returncode == 0
    store = project.store()
    try:
        holder = project.wait_run(lambda runs: store.locks() and one(runs, "holder"))
    finally:
        store.close()
    payload = project.root / "p.json"
    payload.write_text(json.dumps({"holder": holder.id}))
    result = project.al("run", "other", "--payload", str(payload))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'"holder": "{holder.id}"' in result.stdout  # acquire_lock named the holder
    assert "does not belong to that run" in result.stdout and "rc=1" in result.stdout
    done = project.wait_run(lambda runs: one(runs, "holder", "done"))
    assert done.id == holder.id


def test_wait_resumed_by_agent_trigger_and_kill_while_waiting(project, scheduler):
    project.add_scripted_agent("waiter", script=WAITER % "60s")
    project.add_scripted_agent("pinger", script=PINGER)
    project.add_scripted_agent("sleeper", script=WAITER % "60s", config="scale = 1\n")
    scheduler(project)
    assert project.al("run", "waiter", "--no-follow").returncode == 0
    assert project.al("run", "sleeper", "--no-follow").returncode == 0
    waiting = project.wait_run(lambda runs: one(runs, "waiter", "waiting"))
    sleeping = project.wait_run(lambda runs: one(runs, "sleeper", "waiting"))
    assert project.al("run", "pinger").returncode == 0
    done = project.wait_run(lambda runs: one(runs, "waiter", "done"))
    assert done.id == waiting.id
    assert json.loads(done.return_value)["payload"]["context"] == "wake up"
    killed = project.al("kill", sleeping.id)
    assert killed.returncode == 0, killed.stdout + killed.stderr
    final = project.wait_run(lambda runs: one(runs, "sleeper", "killed"))
    assert final.exit_code == 137


def test_wait_times_out(project, scheduler):
    project.add_scripted_agent("waiter", script=WAITER % "1s")
    scheduler(project)
    result = project.al("run", "waiter", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "timed out" in result.stdout.split("return value: ")[1]


def test_wait_resumed_after_scheduler_restart(project, scheduler):
    project.add_scripted_agent("waiter", script=WAITER % "120s")
    project.add_scripted_agent("pinger", script=PINGER)
    first = scheduler(project)
    assert project.al("run", "waiter", "--no-follow").returncode == 0
    waiting = project.wait_run(lambda runs: one(runs, "waiter", "waiting"))
    first.stop()
    scheduler(project)
    assert project.al("run", "pinger").returncode == 0
    done = project.wait_run(lambda runs: one(runs, "waiter", "done"))
    assert done.id == waiting.id
    assert json.loads(done.return_value)["payload"]["context"] == "wake up"


def test_run_adopted_after_scheduler_kill9_continues_from_its_checkpoint(project, scheduler):
    project.add_scripted_agent(
        "steady",
        script="""
        [[turns]]
        tool_calls = [{name = "set_status", arguments = {text = "step one"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 3; echo slept"}}]
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    first = scheduler(project)
    assert project.al("run", "steady", "--no-follow").returncode == 0
    project.wait_run(lambda runs: (r := one(runs, "steady")) and r.status == "step one" and r)
    first.proc.kill()  # kill -9 while the bash call runs
    first.proc.wait(10)
    scheduler(project)
    done = project.wait_run(lambda runs: one(runs, "steady", "done"), timeout=60)
    assert "interrupted before a result was recorded" in done.return_value

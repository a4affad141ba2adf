# ruff: noqa: F811  (the engine fixture is imported from test_session)
"""Calls, locks and waits through the real runner, store, gateway and sandbox commands."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from test_session import add_agent, engine, run, tool_results  # noqa: F401 (fixture)

from llamaherd.types import TriggerEvent


@contextmanager
def dispatching(engine: Any) -> Iterator[None]:
    """Claim and start queued work in the background, as the scheduler's dispatcher does."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            engine.dispatch()
            engine.wakeup.wait(0.05)
            engine.wakeup.clear()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        for worker in list(engine.threads.values()):
            worker.join(10)


def wait_for(predicate, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def claim_and_run(engine: Any) -> Any:
    claimed = engine.claim()
    assert claimed is not None, "nothing claimable"
    return engine.runner.run(claimed[1])


def test_call_agent_and_check_call(engine):
    add_agent(
        engine,
        "caller",
        """
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "callee", context = "add 2 and 3"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-subagent-wait 1 20"}}]
        [[turns]]
        tool_calls = [{name = "check_call", arguments = {call_id = 1}}]
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
    )
    add_agent(
        engine,
        "callee",
        """
        [[turns]]
        tool_calls = [{name = "return_value", arguments = {value = "five ({{ payload.context }})"}}]
        [[turns]]
        text = "done"
    """,
    )
    with dispatching(engine):
        final = run(engine, "caller")
    assert final.state == "done", final.reason
    checked = json.loads(final.return_value)
    assert checked["state"] == "done"
    assert checked["return_value"] == "five (add 2 and 3)"
    callee = engine.store.runs(agent="callee")[0]
    assert (callee.caller_run, callee.call_depth) == (final.id, 1)
    prompt = callee.transcript[2]["content"]
    assert "<skill-subagent>" in prompt and "add 2 and 3" in prompt


def test_call_refusals(engine):
    add_agent(
        engine,
        "selfish",
        """
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "selfish", context = "x"}},
                      {name = "call_agent", arguments = {agent = "nobody", context = "x"}},
                      {name = "check_call", arguments = {call_id = 99}}]
        [[turns]]
        text = "done"
    """,
    )
    final = run(engine, "selfish")
    results = [json.loads(r) for r in tool_results(engine, final.id)]
    assert "cannot call itself" in results[0]["error"]
    assert "no agent 'nobody'" in results[1]["error"]
    assert "no call 99" in results[2]["error"]


def test_call_depth_limit_names_the_chain(engine):
    engine.project.config["maxCallDepth"] = 1
    for name, target in (("a", "b"), ("b", "c"), ("c", "a")):
        add_agent(
            engine,
            name,
            f"""
            [[turns]]
            tool_calls = [{{name = "call_agent", arguments = {{agent = "{target}", context = "go"}}}}]
            [[turns]]
            tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_result }}}}"}}}}]
            [[turns]]
            text = "done"
        """,
        )
    first = run(engine, "a")
    assert json.loads(first.return_value)["ok"] is True
    second = claim_and_run(engine)
    assert second.agent == "b"
    refused = json.loads(second.return_value)
    assert refused["ok"] is False
    assert "maxCallDepth (1): a -> b -> c" in refused["error"]


def test_lock_contention_between_hook_and_model(engine):
    add_agent(
        engine,
        "holder",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 2"}}]
        [[turns]]
        text = "done"
    """,
        config='[hooks]\npre = ["rlock res://shared"]\n',
    )
    add_agent(
        engine,
        "other",
        """
        [[turns]]
        tool_calls = [{name = "acquire_lock", arguments = {uri = "res://shared"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "runlock res://shared; echo rc=$?; AL_RUN_ID={{ payload.holder }} runlock res://shared; echo rc=$?"}}]
        [[turns]]
        text = "done"
    """,
    )
    holder_thread = threading.Thread(target=run, args=(engine, "holder"))
    holder_thread.start()
    lock = wait_for(lambda: engine.store.locks())
    holder_id = lock[0].get("run_id") or lock[0].get("holder")
    other = run(engine, "other", payload={"holder": holder_id})
    holder_thread.join(20)
    results = tool_results(engine, other.id)
    acquired = json.loads(results[0])
    assert acquired["ok"] is False and acquired["holder"] == holder_id
    lines = results[1].splitlines()
    assert json.loads(lines[0])["holder"] == holder_id and lines[1] == "rc=1"
    assert "does not belong" in json.loads(lines[2])["error"] and lines[3] == "rc=1"
    assert engine.store.locks() == []  # released when the holder ended
    assert engine.store.get_run(holder_id).state == "done"


WAITER = """
    [[turns]]
    tool_calls = [{name = "wait_for_trigger", arguments = {filter = {type = "agent", from = "pinger"}, timeout = "%s"}}]
    [[turns]]
    tool_calls = [{name = "return_value", arguments = {value = "{{ last_result }}"}}]
    [[turns]]
    text = "done"
"""


def test_wait_resumed_by_agent_trigger(engine):
    add_agent(engine, "waiter", WAITER % "30s")
    parked = run(engine, "waiter")
    assert parked.state == "waiting" and parked.wait_filter["from"] == "pinger"
    assert engine.runner.active() == set()
    miss = engine.emit(TriggerEvent("waiter", "agent", {"caller_agent": "stranger"}))
    assert miss["resumed"] == []
    engine.store.clear_queue("waiter")
    hit = engine.emit(
        TriggerEvent("waiter", "agent", {"caller_agent": "pinger", "context": "wake"})
    )
    assert hit["resumed"] == [parked.id]
    final = claim_and_run(engine)
    assert final.id == parked.id and final.state == "done", final.reason
    assert json.loads(final.return_value)["payload"]["context"] == "wake"


def test_wait_times_out_with_an_error_result(engine):
    add_agent(engine, "waiter", WAITER % "1s")
    parked = run(engine, "waiter")
    assert parked.state == "waiting"
    engine.runner.expire_wait(engine.store.get_run(parked.id))
    final = claim_and_run(engine)
    assert final.state == "done", final.reason
    assert "timed out" in final.return_value


def test_kill_while_waiting(engine):
    add_agent(engine, "waiter", WAITER % "30m")
    parked = run(engine, "waiter")
    assert engine.runner.kill(parked.id) is True
    final = engine.store.get_run(parked.id)
    assert (final.state, final.exit_code) == ("killed", 137)

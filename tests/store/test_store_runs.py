"""Runs: the state machine, what ending a run settles, waits, calls, history and upkeep."""

from __future__ import annotations

import pytest

from llamaherd.store import (
    EXIT_CODES,
    FINAL_STATES,
    TRANSITIONS,
    InvalidTransition,
    RunRow,
    Store,
    StoreError,
)


def running(store: Store, agent: str = "alpha", **enqueue) -> RunRow:
    store.enqueue(agent, enqueue.pop("kind", "manual"), {}, **enqueue)
    return store.claim({agent: 100}, None, "h")[1]


def at_state(store: Store, state: str) -> RunRow:
    run = running(store)
    if state == "waiting":
        store.set_waiting(run.id, {}, deadline=store._clock() + 60)
    elif state != "running":
        store.transition(run.id, state)
    return store.get_run(run.id)


@pytest.mark.parametrize("start", ["running", "waiting", *FINAL_STATES])
def test_only_allowed_transitions_happen(store: Store, start: str) -> None:
    for target in ("running", "waiting", *FINAL_STATES):
        run = at_state(store, start)
        if target in TRANSITIONS[start]:
            after = store.transition(run.id, target, reason="test")
            assert after.state == target
            assert store.events(run.id)[-1]["data"] == {
                "from": start, "to": target, "reason": "test",
                **({"exit_code": EXIT_CODES[target]} if target in FINAL_STATES else {}),
            }  # fmt: skip
        else:
            with pytest.raises(InvalidTransition, match=f"from {start} to {target}"):
                store.transition(run.id, target)
            assert store.get_run(run.id).state == start


def test_final_state_sets_exit_code_reason_and_time(store: Store, clock) -> None:
    run = running(store)
    clock.advance(5)
    ended = store.transition(run.id, "timeout", reason="ran past 2s")
    assert (ended.exit_code, ended.reason, ended.finished_at) == (124, "ran past 2s", clock.now)
    assert store.get_run(run.id) == ended
    assert store.transition(running(store).id, "error", exit_code=3).exit_code == 3


def test_unknown_run_is_a_clear_error(store: Store) -> None:
    with pytest.raises(StoreError, match="no run 'nope'"):
        store.transition("nope", "done")


@pytest.mark.parametrize("final", FINAL_STATES)
def test_ending_releases_locks_and_retires_the_item(store: Store, final: str) -> None:
    run = running(store)
    assert store.acquire_lock(run.id, "github://o/r/issues/1", ttl=60)["ok"]
    store.transition(run.id, final)
    assert store.locks() == []
    other = running(store)
    assert store.acquire_lock(other.id, "github://o/r/issues/1", ttl=60)["ok"]
    assert store.queue_depth() == {}


def test_ending_settles_the_call(store: Store) -> None:
    caller = running(store, "caller")
    ok_call = store.create_call(caller.id, "callee", "do it", depth=1)
    bad_call = store.create_call(caller.id, "callee", "fail", depth=1)
    assert store.get_call(ok_call)["state"] == "pending"
    ok = running(store, "callee", kind="agent", call_id=ok_call)
    bad = running(store, "callee", kind="agent", call_id=bad_call)
    store.set_return(ok.id, {"answer": 42})
    store.transition(ok.id, "done")
    store.transition(bad.id, "killed", reason="killed by user")
    assert store.get_call(ok_call) | {"created_at": 0, "finished_at": 0} == {
        "id": ok_call, "caller_run": caller.id, "target": "callee", "context": "do it", "depth": 1,
        "state": "done", "return_value": {"answer": 42}, "error": None, "run_id": ok.id,
        "created_at": 0, "finished_at": 0,
    }  # fmt: skip
    failed = store.get_call(bad_call)
    assert failed["state"] == "error" and failed["error"] == "killed: killed by user"


def test_a_retried_call_stays_pending(store: Store) -> None:
    caller = running(store, "caller")
    call_id = store.create_call(caller.id, "callee", "do it", depth=1)
    first = running(store, "callee", kind="agent", call_id=call_id)
    store.transition(first.id, "error", reason="interrupted")
    store.enqueue("callee", "agent", {}, call_id=call_id, recovery={"run": first.id})
    assert store.get_call(call_id)["state"] == "pending"
    second = store.claim({"callee": 1}, None, "h")[1]
    store.set_return(second.id, "ok")
    store.transition(second.id, "done")
    assert store.get_call(call_id)["return_value"] == "ok"


def test_wait_resume_and_expiry(store: Store, clock) -> None:
    run = running(store)
    store.set_waiting(
        run.id, {"source": "github", "event": "issue_comment"}, deadline=clock.now + 30
    )
    waiting = store.get_run(run.id)
    assert waiting.state == "waiting" and waiting.wait_filter["event"] == "issue_comment"
    assert [r.id for r in store.waiting_runs()] == [run.id]
    assert store.expired_waits(clock.now + 29) == []
    assert [r.id for r in store.expired_waits(clock.now + 30)] == [run.id]
    assert store.resume_waiting(run.id, {"comment": "go"})
    assert not store.resume_waiting(run.id, {"comment": "again"})
    assert store.active_count() == 0
    item, resumed = store.claim({"alpha": 1}, None, "h")
    assert resumed.trigger["resume_payload"] == {"comment": "go"} and resumed.wait_filter is None
    assert not store.resume_waiting(run.id, {})  # running, not waiting
    store.set_waiting(run.id, {}, deadline=clock.now + 30)
    assert "resume_payload" not in store.get_run(run.id).trigger  # spent


def test_a_resume_for_a_run_that_ended_is_retired(store: Store) -> None:
    run = running(store)
    store.set_waiting(run.id, {}, deadline=store._clock() + 30)
    assert store.resume_waiting(run.id, {})
    store.transition(run.id, "killed")
    assert store.queue_depth() == {}
    assert store.claim({"alpha": 1}, None, "h") is None


def test_create_run_update_and_lookups(store: Store, clock) -> None:
    run = store.create_run("alpha", "manual", host="fg:1", deadline=99.0)
    assert run.state == "running" and run.host == "fg:1" and run.trigger["kind"] == "manual"
    store.update_run(run.id, sandbox={"container": "abc"}, input_tokens=10, output_tokens=3,
                     rerun_requested=True, token_hash="f" * 64)  # fmt: skip
    store.checkpoint(run.id, [{"role": "user", "content": "hi"}])
    got = store.get_run(run.id)
    assert got.sandbox == {"container": "abc"} and got.transcript[0]["content"] == "hi"
    assert got.rerun_requested is True and got.input_tokens == 10
    with pytest.raises(TypeError):
        store.update_run(run.id, state="done")
    assert store.find_run(run.id) == got and store.find_run(run.id[:8]) == got
    clock.advance(1)
    newer = store.create_run("alpha", "manual")
    assert store.find_run("alpha-") is None  # ambiguous
    assert store.find_run("nope") is None and store.get_run("nope") is None
    assert [r.id for r in store.runs("alpha", ("running",))] == [newer.id, run.id]


def test_status_and_events(store: Store, clock) -> None:
    run = running(store)
    store.set_status(run.id, "reading the issue")
    clock.advance(1)
    store.set_status(run.id, "writing a fix")
    store.add_event(run.id, "tool_call", {"name": "bash"})
    assert store.get_run(run.id).status == "writing a fix"
    assert [m["text"] for m in store.status_messages(run.id)] == [
        "reading the issue",
        "writing a fix",
    ]
    events = store.events(run.id)
    assert [e["type"] for e in events] == ["state", "tool_call"]
    assert store.events(run.id, after_id=events[0]["id"]) == events[1:]


def test_agent_state_events_and_pause(store: Store) -> None:
    assert store.agent_state("alpha") == "idle"
    store.set_agent_state("alpha", "hibernate", "owner asked")
    store.add_agent_event("alpha", "note", {"x": 1})
    assert store.agent_state("alpha") == "hibernate"
    assert store.agent_states() == {"alpha": "hibernate"}
    assert [e["type"] for e in store.agent_events("alpha")] == ["state", "note"]
    assert store.agent_events("alpha", limit=1)[0]["type"] == "note"
    with pytest.raises(ValueError):
        store.set_agent_state("alpha", "sleepy", "x")
    store.set_paused("alpha", True)
    store.set_paused(None, True)
    assert store.paused() == (True, {"alpha"})
    store.set_paused(None, False)
    store.set_paused("alpha", False)
    assert store.paused() == (False, set())


def test_trigger_ticks_once(store: Store) -> None:
    assert store.last_tick("cron:alpha") is None
    assert store.claim_tick("cron:alpha", 60.0)
    assert not store.claim_tick("cron:alpha", 60.0)
    assert store.claim_tick("cron:alpha", 120.0) and store.claim_tick("cron:beta", 60.0)
    assert store.claim_tick("watch:alpha", 60.0), "keys of another trigger type are their own"
    assert store.last_tick("cron:alpha") == 120.0


def test_hosts(store: Store, clock) -> None:
    store.heartbeat_host("a:1", {"pid": 1})
    clock.advance(30)
    store.heartbeat_host("b:2", {"pid": 2})
    assert [h["host"] for h in store.hosts()] == ["a:1", "b:2"]
    assert store.stale_hosts(clock.now - 10) == ["a:1"]
    store.forget_host("a:1")
    assert store.stale_hosts(clock.now + 1) == ["b:2"]


def test_stats(store: Store, clock) -> None:
    caller = running(store, "caller")
    store.create_call(caller.id, "callee", "x", depth=1)
    for seconds, final in ((1, "done"), (2, "done"), (10, "error")):
        run = running(store, "callee")
        store.update_run(run.id, input_tokens=100, output_tokens=10)
        clock.advance(seconds)
        store.transition(run.id, final)
    stats = store.stats()
    assert stats["runs"] == 4 and stats["states"] == {"running": 1, "done": 2, "error": 1}
    assert stats["exit_codes"] == {"0": 2, "1": 1}
    assert stats["durations"]["p50"] == 2 and stats["durations"]["max"] == 10
    assert stats["tokens"] == {"input": 300, "output": 30}
    assert stats["calls"] == [{"caller": "caller", "target": "callee", "count": 1}]
    assert store.stats("callee")["runs"] == 3
    assert store.stats(since=clock.now + 1)["runs"] == 0


def test_prune_keeps_recent_and_live(store: Store, clock) -> None:
    old = running(store)
    store.add_event(old.id, "log", {})
    store.transition(old.id, "done")
    store.claim_tick("cron:alpha", clock.now - 60)
    store.claim_tick("cron:alpha", clock.now)
    live = running(store)
    clock.advance(20 * 86400)
    recent = running(store)
    store.transition(recent.id, "done")
    assert store.prune(14) >= 4
    assert store.get_run(old.id) is None and store.events(old.id) == []
    assert store.get_run(live.id) is not None and store.get_run(recent.id) is not None
    assert store.last_tick("cron:alpha") == clock.now - 20 * 86400, "the latest tick is kept"
    assert store._m.TriggerTick.select().count() == 1, "older ticks go"


def test_last_finished_is_each_agents_latest_final_run(store: Store, clock) -> None:
    first = running(store, "alpha")
    store.transition(first.id, "error", reason="boom")
    clock.advance(1)
    latest = running(store, "alpha")
    store.transition(latest.id, "done")
    running(store, "alpha")  # still running: not a result yet
    running(store, "beta")
    found = store.last_finished(["alpha", "beta", "gamma"])
    assert set(found) == {"alpha"}  # beta has no final run, gamma no run at all
    run_id, state, exit_code, finished_at = found["alpha"]
    assert (run_id, state, exit_code) == (latest.id, "done", EXIT_CODES["done"])
    assert finished_at == store.get_run(latest.id).finished_at

"""The store methods behind issue 23: claiming one run's resume ahead of the queue (an approved
suspension), and each run's own call numbering; on SQLite and on PostgreSQL."""

from __future__ import annotations

from llamaherd.store import RunRow, Store


def running(store: Store, agent: str = "alpha", host: str = "h") -> RunRow:
    store.enqueue(agent, "manual", {})
    return store.claim({agent: 100}, None, host)[1]


def test_claim_resume_takes_that_runs_resume_whatever_is_queued(store: Store, clock) -> None:
    run = running(store)
    store.set_waiting(run.id, {"type": "suspension"}, deadline=clock.now + 60)
    assert store.claim_resume(run.id, "h") is None  # nothing to resume yet
    store.enqueue("alpha", "manual", {"n": 1})  # queued before the approval
    assert store.resume_waiting(run.id, {"approved": True})
    assert store.claim({"alpha": 0}, None, "h") is None  # the agent's scale is full

    item, resumed = store.claim_resume(run.id, "h")
    assert item.kind == "resume" and resumed.id == run.id and resumed.state == "running"
    assert resumed.trigger["resume_payload"] == {"approved": True}
    assert store.claim_resume(run.id, "h") is None  # claimed once
    assert store.queue_depth("alpha")["alpha"] == 1  # the older item still waits


def test_claim_resume_leaves_a_resume_to_the_live_host_that_parked_it(store: Store, clock) -> None:
    store.heartbeat_host("parker", {})
    run = running(store, host="parker")
    store.set_waiting(run.id, {"type": "suspension"}, deadline=clock.now + 60)
    assert store.resume_waiting(run.id, {"approved": True})
    assert store.claim_resume(run.id, "other") is None
    assert store.claim_resume(run.id, "parker")[1].host == "parker"


def test_call_ids_number_each_runs_calls_from_one(store: Store) -> None:
    first, second = running(store), running(store, "beta")
    made = [store.create_call(run.id, "gamma", "ctx", 1) for run in (first, second, first)]
    assert store.call_ids(first.id) == [made[0], made[2]]
    assert store.call_ids(second.id) == [made[1]]
    assert store.call_ids("nobody") == []

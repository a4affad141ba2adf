"""Queue semantics: FIFO, fairness, bound with drops, dedupe, coalesce, scale, pause."""

from __future__ import annotations

import logging

import pytest

from llamaherd.store import Store


def claim_all(store: Store, scales: dict[str, int], global_scale: int | None = None) -> list:
    claimed = []
    while (got := store.claim(scales, global_scale, "host-a")) is not None:
        claimed.append(got)
    return claimed


def test_enqueue_then_claim_creates_a_running_run(store: Store) -> None:
    item_id = store.enqueue("alpha", "webhook", {"n": 1}, "an event", source="github")
    item, run = store.claim({"alpha": 1}, None, "host-a")
    assert item.id == item_id and item.payload == {"n": 1} and item.source == "github"
    assert run.state == "running" and run.host == "host-a" and run.item_id == item_id
    assert run.id.startswith("alpha-") and len(run.id) == len("alpha-") + 8
    assert run.trigger["payload"] == {"n": 1} and run.trigger["prompt"] == "an event"
    assert store.get_run(run.id) == run
    assert store.queue_depth() == {}
    assert store.claim({"alpha": 1}, None, "host-a") is None


def test_fifo_per_agent(store: Store) -> None:
    ids = [store.enqueue("alpha", "manual", {"n": n}) for n in range(5)]
    got = [item.id for item, _ in claim_all(store, {"alpha": 10})]
    assert got == ids


def test_agents_are_served_fairly(store: Store) -> None:
    for n in range(5):
        store.enqueue("busy", "manual", {"n": n})
    store.enqueue("quiet", "manual", {})
    claimed = claim_all(store, {"busy": 5, "quiet": 5})
    # busy's oldest first; quiet then goes ahead of busy's second item (fewer running).
    assert [item.agent for item, _ in claimed[:2]] == ["busy", "quiet"]


def test_queue_bound_keeps_newest_and_records_drops(store: Store, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="llamaherd.store")
    ids = [store.enqueue("alpha", "webhook", {"n": n}, limit=100) for n in range(150)]
    assert store.queue_depth("alpha") == {"alpha": 100}
    dropped = [e for e in store.agent_events("alpha", limit=500) if e["type"] == "dropped"]
    assert [e["data"]["item_id"] for e in dropped] == ids[:50]
    # One warning for the whole burst, not one per dropped item.
    assert sum("dropping its oldest items" in r.getMessage() for r in caplog.records) == 1
    kept = [item.id for item, _ in claim_all(store, {"alpha": 1000})]
    assert kept == ids[50:]


def test_a_call_dropped_from_a_full_queue_is_settled_as_an_error(store: Store) -> None:
    store.enqueue("caller", "manual", {})
    _, caller = store.claim({"caller": 1}, None, "h")
    call_id = store.create_call(caller.id, "callee", "please", depth=1)
    store.enqueue("callee", "agent", {}, limit=1, call_id=call_id)
    store.enqueue("callee", "webhook", {}, limit=1)  # pushes the call's item out
    call = store.get_call(call_id)
    assert call["state"] == "error" and "queue of callee was full" in call["error"]


def test_resume_items_are_never_dropped_nor_counted(store: Store) -> None:
    store.enqueue("alpha", "manual", {})
    _, run = store.claim({"alpha": 1}, None, "h")
    store.set_waiting(run.id, {"event": "x"}, deadline=store._clock() + 60)
    assert store.resume_waiting(run.id, {"answer": 42})
    for n in range(5):
        store.enqueue("alpha", "webhook", {"n": n}, limit=2)
    assert store.queue_depth("alpha") == {"alpha": 3}  # 2 webhooks + the resume
    item, resumed = store.claim({"alpha": 1}, None, "h2")
    assert item.kind == "resume" and resumed.id == run.id and resumed.state == "running"
    assert resumed.trigger["resume_payload"] == {"answer": 42} and resumed.host == "h2"


def test_dedupe_key(store: Store) -> None:
    first = store.enqueue("alpha", "webhook", {}, dedupe_key="github:abc")
    assert first is not None
    assert store.enqueue("alpha", "webhook", {}, dedupe_key="github:abc") is None
    assert store.enqueue("beta", "webhook", {}, dedupe_key="github:abc") is None
    claim_all(store, {"alpha": 1})
    assert store.enqueue("alpha", "webhook", {}, dedupe_key="github:abc") is None
    assert store.queue_depth() == {}


def test_coalesce(store: Store) -> None:
    assert store.enqueue("alpha", "scheduled", {}, coalesce=True) is not None
    assert store.enqueue("alpha", "scheduled", {}, coalesce=True) is None
    assert store.enqueue("alpha", "manual", {}, coalesce=True) is not None
    assert store.enqueue("beta", "scheduled", {}, coalesce=True) is not None
    claim_all(store, {"alpha": 5})
    assert store.enqueue("alpha", "scheduled", {}, coalesce=True) is not None  # none queued now


def test_scale_counts_running_not_waiting(store: Store) -> None:
    for n in range(6):
        store.enqueue("alpha", "manual", {"n": n})
    runs = [run for _, run in claim_all(store, {"alpha": 3})]
    assert len(runs) == 3 and store.active_count("alpha") == 3
    store.transition(runs[0].id, "done")
    store.set_waiting(runs[1].id, {}, deadline=store._clock() + 10)
    assert len(claim_all(store, {"alpha": 3})) == 2
    assert store.active_count() == 3 and store.queue_depth() == {"alpha": 1}


def test_scale_zero_paused_and_unknown_agents_are_skipped(store: Store) -> None:
    for agent in ("off", "paused", "unknown"):
        store.enqueue(agent, "manual", {})
    assert store.claim({"off": 0, "paused": 1}, None, "h", paused={"paused"}) is None
    assert store.queue_depth() == {"off": 1, "paused": 1, "unknown": 1}


def test_global_scale_caps_all_agents(store: Store) -> None:
    for agent in ("a", "b", "c"):
        store.enqueue(agent, "manual", {})
        store.enqueue(agent, "manual", {})
    claimed = claim_all(store, {"a": 5, "b": 5, "c": 5}, global_scale=2)
    assert len(claimed) == 2 and store.active_count() == 2


def test_clear_queue(store: Store) -> None:
    store.enqueue("alpha", "manual", {})
    store.enqueue("alpha", "webhook", {})
    store.enqueue("beta", "webhook", {})
    assert store.clear_queue("alpha", keep={"manual"}) == 1
    assert store.clear_queue("alpha") == 1
    assert store.queue_depth() == {"beta": 1}
    assert store.queue_depth("alpha") == {"alpha": 0}


def test_item_carries_call_and_recovery(store: Store) -> None:
    store.enqueue("caller", "manual", {})
    _, caller = store.claim({"caller": 1}, None, "h")
    call_id = store.create_call(caller.id, "callee", "please", depth=1)
    recovery = {"interrupted_run": "x", "started_at": 1.0}
    store.enqueue(
        "callee", "agent", {"context": "please"}, call_id=call_id, recovery=recovery, rerun_count=2
    )
    item, run = store.claim({"callee": 1}, None, "h")
    assert item.call_id == call_id and item.recovery == recovery
    assert run.call_id == call_id and run.caller_run == caller.id and run.call_depth == 1
    assert run.rerun_count == 2 and run.trigger["recovery"] == recovery
    assert store.get_call(call_id)["run_id"] == run.id


@pytest.mark.parametrize("agents", [1, 250])
def test_many_agents(store: Store, agents: int) -> None:
    names = [f"agent{n}" for n in range(agents)]
    for name in names:
        store.enqueue(name, "manual", {})
    assert len(claim_all(store, dict.fromkeys(names, 1))) == agents


def test_enqueue_many_commits_each_item_as_enqueue_would(store: Store) -> None:
    items = [{"agent": "alpha", "kind": "webhook", "payload": {"n": n}} for n in range(3)]
    items.append({"agent": "beta", "kind": "webhook", "payload": {}, "dedupe_key": "k"})
    items.append({"agent": "beta", "kind": "webhook", "payload": {}, "dedupe_key": "k"})
    items += [
        {"agent": "gamma", "kind": "webhook", "payload": {"n": n}, "limit": 1} for n in (1, 2)
    ]
    ids = store.enqueue_many(items)
    assert ids[4] is None and None not in ids[:4] + ids[5:] and ids[:4] == sorted(ids[:4])
    assert store.queue_depth() == {"alpha": 3, "beta": 1, "gamma": 1}
    claimed = claim_all(store, {"alpha": 5, "gamma": 1})
    assert [item.payload for item, _ in claimed] == [{"n": 0}, {"n": 2}, {"n": 1}, {"n": 2}]


def test_enqueue_many_is_all_or_nothing(store: Store) -> None:
    good = {"agent": "alpha", "kind": "webhook", "payload": {}}
    with pytest.raises(TypeError):
        store.enqueue_many([good, {"agent": "alpha", "kind": "webhook", "payload": {1j: 0}}])
    assert store.queue_depth() == {}


def _feed(store: Store, clock) -> None:
    """A waiting run with a resume item queued, and 12 items for agents of different scales."""
    store.enqueue("waiter", "manual", {})
    _, waiting = store.claim({"waiter": 1}, None, "h")
    store.set_waiting(waiting.id, {"event": "x"}, deadline=clock() + 60)
    for n in range(12):
        store.enqueue(("busy", "quiet", "busy", "full")[n % 4], "manual", {"n": n})
    assert store.resume_waiting(waiting.id, {"ok": True})


def _drain(store: Store, take) -> list[list[tuple[str, dict]]]:
    """Batches taken by ``take()`` until the queue is empty; after each, every other running
    run is finished (all of them when nothing could be taken), so room opens up as in a
    scheduler."""
    batches, running = [], []
    while store.queue_depth():
        got = take()
        batches.append([(item.agent, item.payload) for item, _ in got])
        running += [run.id for _, run in got]
        finished = running[::2] if got else running
        for run_id in finished:
            store.transition(run_id, "done")
        running = [run_id for run_id in running if run_id not in finished]
    return batches


@pytest.mark.parametrize("limit", [2, 5, 100])
def test_claim_many_takes_what_claims_in_a_row_take(
    store: Store, limit: int, db_url: str, clock
) -> None:
    """Same items in the same order (fairness, FIFO, scale, global scale, a resume item) as
    one ``claim`` after another on a twin database fed alike."""
    if not db_url.startswith("sqlite"):
        pytest.skip("the twin is a second SQLite file (on PostgreSQL each claim is its own)")
    scales = {"busy": 4, "quiet": 2, "full": 1, "waiter": 1}
    _feed(store, clock)
    batched = _drain(store, lambda: store.claim_many(scales, 6, "h", limit=limit))
    twin = Store.open(db_url.replace("/.al/", "/twin/.al/"), clock=clock)
    try:
        _feed(twin, clock)

        def one_by_one() -> list:
            got = []
            while len(got) < limit and (claimed := twin.claim(scales, 6, "h")) is not None:
                got.append(claimed)
            return got

        assert batched == _drain(twin, one_by_one)
    finally:
        twin.close()
    assert all(len(batch) <= limit for batch in batched)
    assert sum(len(batch) for batch in batched) == 13  # every item, the resume included
    assert limit == 2 or any(len(batch) > 2 for batch in batched)


def test_unclaim_puts_an_unstarted_run_back_first_in_line(store: Store) -> None:
    store.enqueue("caller", "manual", {})
    _, caller = store.claim({"caller": 1}, None, "h")
    call_id = store.create_call(caller.id, "callee", "please", depth=1)
    first = store.enqueue("callee", "agent", {"n": 1}, call_id=call_id)
    second = store.enqueue("callee", "manual", {"n": 2})
    item, run = store.claim({"callee": 1}, None, "h")
    assert item.id == first and store.get_call(call_id)["run_id"] == run.id
    assert store.unclaim(run.id)  # its runtime had no room (SandboxBusy)
    assert store.get_run(run.id) is None and store.events(run.id) == []
    assert store.get_call(call_id)["run_id"] is None  # the caller still waits for it
    assert store.queue_depth("callee") == {"callee": 2}
    again, rerun = store.claim({"callee": 1}, None, "h")
    assert again.id == first and again.payload == {"n": 1} and rerun.id != run.id
    assert store.get_call(call_id)["run_id"] == rerun.id
    assert [i.id for i, _ in claim_all(store, {"callee": 2})] == [second]


def test_unclaim_leaves_a_killed_run_ended(store: Store) -> None:
    store.enqueue("alpha", "manual", {})
    _, run = store.claim({"alpha": 1}, None, "h")
    store.transition(run.id, "killed", reason="killed by user")
    assert not store.unclaim(run.id)
    assert store.get_run(run.id).state == "killed" and store.queue_depth() == {}

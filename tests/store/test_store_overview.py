"""The overview reads (the dashboard's): run search, activity and spend per agent, queued items
and removing one, and the change marker a live page watches. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from llamaherd.store import Store


def finished(store: Store, agent: str, state: str = "done", cost: float | None = None) -> str:
    store.enqueue(agent, "manual", {})
    run = store.claim({agent: 100}, None, "h")[1]
    store.add_event(run.id, "model_call", {"model": "m", "cost_usd": cost})
    store.transition(run.id, state)
    return run.id


def test_find_runs_combines_every_filter_newest_first(store: Store, clock: Any) -> None:
    first = finished(store, "alpha")
    clock.advance(3600)
    second = finished(store, "alpha", "error")
    store.update_run(second, status="Deploying the Frontend")
    third = finished(store, "beta")
    ids = [run.id for run in store.find_runs()]
    assert ids == [third, second, first]
    assert [r.id for r in store.find_runs(agent="alpha")] == [second, first]
    assert [r.id for r in store.find_runs(states=("error",))] == [second]
    assert [r.id for r in store.find_runs(text="frontend")] == [second]
    assert [r.id for r in store.find_runs(text=first[-6:].upper())] == [first]
    assert [r.id for r in store.find_runs(since=clock() - 60)] == [third, second]
    assert [r.id for r in store.find_runs(until=clock() - 60)] == [first]
    assert store.find_runs(trigger_kind="webhook") == []
    assert [r.id for r in store.find_runs(limit=1, offset=1)] == [second]


def test_activity_and_costs_per_agent(store: Store, clock: Any) -> None:
    since = clock()
    finished(store, "alpha", cost=0.5)
    clock.advance(2 * 3600)
    finished(store, "alpha", "error", cost=0.25)
    beta = finished(store, "beta")  # its price unknown: no cost
    seen = store.activity(since, 3600, 24)
    assert seen["alpha"]["runs"] == 2 and seen["alpha"]["done"] == 1
    assert seen["alpha"]["finished"] == 2
    assert seen["alpha"]["per_bucket"][:3] == [1, 0, 1] and sum(seen["beta"]["per_bucket"]) == 1
    spend = store.costs(since)
    assert spend["agents"] == {"alpha": 0.75}
    assert beta not in spend["runs"] and sum(spend["runs"].values()) == 0.75
    assert store.costs(clock() - 60, agent="alpha")["agents"] == {"alpha": 0.25}


def test_queued_items_are_listed_and_one_is_removed(store: Store) -> None:
    before = store.change_marker()
    ids = [store.enqueue("alpha", "manual", {"n": n}) for n in range(3)]
    assert [item.id for item in store.queued_items("alpha")] == ids
    marker = store.change_marker()
    assert marker != before
    assert store.drop_queued(ids[1]) is True
    assert store.drop_queued(ids[1]) is False  # no longer queued
    assert [item.payload["n"] for item in store.queued_items("alpha")] == [0, 2]
    assert store.queue_depth() == {"alpha": 2}
    assert store.change_marker() != marker
    assert store.change_marker() == store.change_marker()  # nothing changed: the same value

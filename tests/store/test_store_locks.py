"""Resource locks: contention, extension, TTL reclaim, deadlock refusal, release."""

from __future__ import annotations

from llamaherd.store import RunRow, Store

URI = "github://acme/app/issues/7"


def running(store: Store, n: int) -> list[RunRow]:
    for _ in range(n):
        store.enqueue("alpha", "manual", {})
    return [store.claim({"alpha": 100}, None, "h")[1] for _ in range(n)]


def test_contention_names_the_holder(store: Store, clock) -> None:
    a, b = running(store, 2)
    assert store.acquire_lock(a.id, URI, ttl=60)["ok"]
    refused = store.acquire_lock(b.id, URI, ttl=60)
    assert refused == {"ok": False, "holder": a.id, "expires_at": clock.now + 60}
    assert store.locks()[0]["holder"] == a.id
    assert not store.release_lock(b.id, URI)
    assert store.release_lock(a.id, URI)
    assert store.acquire_lock(b.id, URI, ttl=60)["ok"]


def test_reacquire_and_heartbeat_extend(store: Store, clock) -> None:
    (a,) = running(store, 1)
    store.acquire_lock(a.id, URI, ttl=10)
    store.acquire_lock(a.id, "other://x", ttl=10)
    clock.advance(5)
    assert store.acquire_lock(a.id, URI, ttl=10)["expires_at"] == clock.now + 10
    assert store.heartbeat_lock(a.id, None, ttl=100) == 2
    assert store.heartbeat_lock(a.id, "other://x", ttl=200) == 1
    assert {k["uri"]: k["expires_at"] for k in store.locks()} == {
        URI: clock.now + 100,
        "other://x": clock.now + 200,
    }


def test_expired_locks_are_reclaimed(store: Store, clock) -> None:
    a, b = running(store, 2)
    store.acquire_lock(a.id, URI, ttl=30)
    clock.advance(29)
    assert not store.acquire_lock(b.id, URI, ttl=30)["ok"]
    clock.advance(1)
    assert store.locks() == []
    assert store.acquire_lock(b.id, URI, ttl=30)["ok"]
    assert store.locks()[0]["holder"] == b.id
    assert store.heartbeat_lock(a.id, URI, ttl=30) == 0


def test_deadlock_is_refused_naming_both(store: Store) -> None:
    a, b = running(store, 2)
    assert store.acquire_lock(a.id, "res://1", ttl=60)["ok"]
    assert store.acquire_lock(b.id, "res://2", ttl=60)["ok"]
    assert store.acquire_lock(a.id, "res://2", ttl=60)["holder"] == b.id  # a now waits on b
    refused = store.acquire_lock(b.id, "res://1", ttl=60)
    assert refused["ok"] is False and refused["deadlock"] == [b.id, a.id]
    assert a.id in refused["message"] and b.id in refused["message"]


def test_longer_cycles_and_stale_waits(store: Store) -> None:
    a, b, c = running(store, 3)
    for run, uri in ((a, "r://a"), (b, "r://b"), (c, "r://c")):
        store.acquire_lock(run.id, uri, ttl=60)
    store.acquire_lock(a.id, "r://b", ttl=60)  # a waits on b
    store.acquire_lock(b.id, "r://c", ttl=60)  # b waits on c
    assert store.acquire_lock(c.id, "r://a", ttl=60)["deadlock"] == [c.id, a.id, b.id]
    store.release_lock(b.id, "r://c")  # b gives up waiting (and never held r://c)
    refused = store.acquire_lock(c.id, "r://a", ttl=60)
    assert "deadlock" not in refused and refused["holder"] == a.id


def test_locks_go_when_the_run_ends(store: Store) -> None:
    a, b = running(store, 2)
    store.acquire_lock(a.id, "r://1", ttl=60)
    store.acquire_lock(a.id, "r://2", ttl=60)
    store.acquire_lock(b.id, "r://1", ttl=60)
    store.transition(a.id, "killed", reason="killed by user")
    assert store.locks() == []
    assert store.acquire_lock(b.id, "r://1", ttl=60)["ok"]
    assert store.release_all_locks(b.id) == 1

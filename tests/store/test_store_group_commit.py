"""Group commit: concurrent writes share transactions, each all or nothing, each answered after
the commit that holds it (on PostgreSQL each is its own transaction; the outcome is the same)."""

from __future__ import annotations

import threading

import pytest

from llamaherd.store import InvalidTransition, Store

THREADS = 16
PER_THREAD = 25


def in_threads(count: int, work) -> list:
    results: list = [None] * count
    gate = threading.Barrier(count)

    def run(n: int) -> None:
        gate.wait()  # all at once: the writes queue up together
        results[n] = work(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_enqueues_are_each_committed_once(store: Store, db_url: str) -> None:
    def enqueue(n: int) -> list[int]:
        return [
            store.enqueue(f"agent{n % 4}", "webhook", {"n": n, "i": i}) for i in range(PER_THREAD)
        ]

    ids = [item for batch in in_threads(THREADS, enqueue) for item in batch]
    assert None not in ids and len(set(ids)) == THREADS * PER_THREAD
    # Answered after the commit: another connection sees every acknowledged item.
    other = Store.open(db_url)
    try:
        assert sum(other.queue_depth().values()) == THREADS * PER_THREAD
    finally:
        other.close()


def test_a_failing_write_spoils_no_other_in_its_batch(store: Store) -> None:
    store.enqueue("alpha", "manual", {})
    _, run = store.claim({"alpha": 1}, None, "h")
    store.transition(run.id, "done")

    def write(n: int) -> object:
        if n % 2:
            try:
                store.transition(run.id, "killed")  # not allowed from done: raises
            except InvalidTransition as exc:
                return exc
        return store.enqueue("beta", "manual", {"n": n})

    results = in_threads(THREADS, write)
    failed = [r for r in results if isinstance(r, InvalidTransition)]
    queued = [r for r in results if isinstance(r, int)]
    assert len(failed) == THREADS // 2 and len(queued) == THREADS // 2
    assert store.queue_depth("beta") == {"beta": THREADS // 2}
    assert store.get_run(run.id).state == "done"


def test_write_runs_a_function_in_one_transaction(store: Store) -> None:
    def both() -> int:
        first = store.enqueue("alpha", "manual", {"n": 1})
        store.enqueue("alpha", "manual", {"n": 2})
        raise RuntimeError(f"after {first}")

    with pytest.raises(RuntimeError, match="after"):
        store.write(both)
    assert store.queue_depth() == {}  # all or nothing
    assert store.write(lambda: store.enqueue("alpha", "manual", {})) is not None

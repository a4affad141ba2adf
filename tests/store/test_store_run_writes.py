"""``Store.run_writes``: what the store holds of a run as its write budget counts it
(``llamaherd.write_budget``), on every backend."""

from __future__ import annotations

from llamaherd.write_budget import CALL_BYTES, TRANSCRIPT_COPIES


def test_run_writes_counts_events_statuses_locks_calls_and_the_transcript(store):
    run = store.create_run("a", "manual")
    records, size = store.run_writes(run.id)
    store.add_event(run.id, "note", {"text": "e" * 100})
    store.set_status(run.id, "s" * 50)
    store.acquire_lock(run.id, "lock://" + "u" * 93, 60)
    store.create_call(run.id, "b", "c" * 1000, 1)
    transcript = [{"role": "meta"}, {"role": "user", "content": "x" * 500}]
    store.checkpoint(run.id, transcript)
    more, larger = store.run_writes(run.id)
    assert more - records == 1 + 1 + 1 + 2  # the call and its queued trigger: two
    expected = 100 + 50 + 2 * 100 + 2 * 1000 + CALL_BYTES + TRANSCRIPT_COPIES * 500
    assert expected < larger - size < expected + 200  # JSON around the texts

"""`kill -9` inside a debounce window and inside a batch: the pending triggers are in the store,
so the restarted scheduler runs each exactly once."""

from __future__ import annotations

from llamaherd.testing import wait_until

DEBOUNCED = """
webhooks = [{ source = "github", events = ["push"] }]

[flow]
key = "repository.full_name"
debounce = { period = "30s" }
"""
BATCHED = """
webhooks = [{ source = "github", events = ["push"] }]

[flow]
batch = { maxSize = 10, timeout = "1m" }
"""


def test_kill_9_in_a_debounce_window_still_runs_once(project, start, clock, runs_of, kit):
    project.add_scripted_agent("builder", DEBOUNCED)
    first = start(project)
    for seq in range(5):
        kit.deliver(first.url, kit.push("acme/widgets", seq))
    first.kill9()
    second = start(project)
    for seq in range(5, 8):
        kit.deliver(second.url, kit.push("acme/widgets", seq))
    assert runs_of(project) == []
    clock.advance(31)
    [run] = wait_until(lambda: [r for r in runs_of(project) if r.state == "done"] or None)
    assert run.trigger["flow"]["count"] == 8
    assert run.trigger["payload"]["payload"]["seq"] == 7
    second.kill9()
    start(project)  # nothing left to run: a third start runs nothing more
    clock.advance(60)
    store = project.store()
    try:
        assert store.queue_depth() == {}
    finally:
        store.close()
    assert len(runs_of(project)) == 1


def test_kill_9_in_a_batch_still_runs_it_once(project, start, clock, runs_of, kit):
    project.add_scripted_agent("collector", BATCHED)
    first = start(project)
    for seq in range(4):
        kit.deliver(first.url, kit.push("acme/widgets", seq))
    first.kill9()
    start(project)
    clock.advance(61)
    [run] = wait_until(lambda: [r for r in runs_of(project) if r.state == "done"] or None)
    assert [m["payload"]["payload"]["seq"] for m in run.trigger["flow"]["batch"]] == [0, 1, 2, 3]
    assert len(runs_of(project)) == 1

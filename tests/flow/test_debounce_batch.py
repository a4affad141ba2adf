"""Debounce and batch through a real scheduler: bursts of signed deliveries become one run per
key (the last payload and the count) or runs of at most ``maxSize`` payloads, none twice."""

from __future__ import annotations

from llamaherd.testing import wait_until

DEBOUNCED = """
webhooks = [{ source = "github", events = ["push"] }]

[flow]
key = "repository.full_name"
debounce = { period = "2s", timeout = "1m" }
"""


def test_debounce_runs_once_per_key_with_the_last_payload_and_the_count(
    project, start, clock, runs_of, kit
):
    project.add_scripted_agent("builder", DEBOUNCED)
    scheduler = start(project)
    for seq in range(1, 11):
        kit.deliver(scheduler.url, kit.push("acme/widgets", seq))
    for seq in range(1, 4):
        kit.deliver(scheduler.url, kit.push("acme/gadgets", seq))
    # Each delivery was committed before its 202; the clock stands, so no window has closed.
    assert runs_of(project) == []
    stat = project.al("stat", "builder", check=True, env={"COLUMNS": "300"}).stdout
    assert "flow: debounce 2s (at most 60s)" in stat
    assert "key 'acme/widgets': 1 queued" not in stat
    assert "key 'acme/widgets': debouncing 10 pending, fires in 2s" in stat
    assert "key 'acme/gadgets': debouncing 3 pending, fires in 2s" in stat

    clock.advance(3)

    def two_done():
        done = [r for r in runs_of(project) if r.state == "done"]
        return done if len(done) == 2 else None

    done = wait_until(two_done, what="two debounced runs")
    by_repo = {r.trigger["payload"]["payload"]["repository"]["full_name"]: r for r in done}
    assert set(by_repo) == {"acme/widgets", "acme/gadgets"}
    widgets, gadgets = by_repo["acme/widgets"], by_repo["acme/gadgets"]
    assert widgets.trigger["payload"]["payload"]["seq"] == 10
    assert widgets.trigger["flow"]["count"] == 10 and len(widgets.trigger["flow"]["ids"]) == 10
    assert gadgets.trigger["payload"]["payload"]["seq"] == 3
    assert gadgets.trigger["flow"]["count"] == 3
    assert len(runs_of(project)) == 2
    store = project.store()
    try:
        assert store.queue_depth() == {}, "every delivery went into one of the two runs"
    finally:
        store.close()
    prompt = project.al("logs", widgets.id, "--json", check=True).stdout
    assert prompt  # the run's log is there


def test_debounce_timeout_runs_a_stream_that_never_goes_quiet(project, start, clock, runs_of, kit):
    project.add_scripted_agent("builder", DEBOUNCED)
    scheduler = start(project)
    # A delivery every second for 70 s of the fake clock: never 2 s of quiet.
    for seq in range(70):
        kit.deliver(scheduler.url, kit.push("acme/widgets", seq))
        clock.advance(1)
        if seq == 60:
            [run] = wait_until(lambda: runs_of(project) or None, what="the run the timeout forced")
            assert run.trigger["flow"]["count"] >= 60
    clock.advance(3)
    wait_until(lambda: len(runs_of(project)) == 2, what="the rest of the stream running once")


BATCHED = """
webhooks = [{ source = "github", events = ["push"] }]

[flow]
batch = { maxSize = 10, timeout = "5m" }
"""


def test_batch_of_ten_with_25_triggers_makes_3_runs_with_every_payload_once(
    project, start, clock, runs_of, kit
):
    project.add_scripted_agent("collector", BATCHED)
    scheduler = start(project)
    for seq in range(25):
        kit.deliver(scheduler.url, kit.push("acme/widgets", seq))
    # Two batches are full; the last five wait for the timeout.
    wait_until(lambda: len([r for r in runs_of(project) if r.state == "done"]) == 2)
    clock.advance(301)
    wait_until(lambda: len([r for r in runs_of(project) if r.state == "done"]) == 3)
    runs = runs_of(project)
    assert len(runs) == 3
    sizes = sorted(len(r.trigger["flow"]["batch"]) for r in runs)
    assert sizes == [5, 10, 10]
    seqs = [m["payload"]["payload"]["seq"] for r in runs for m in r.trigger["flow"]["batch"]]
    assert sorted(seqs) == list(range(25)), "every payload once, none twice"

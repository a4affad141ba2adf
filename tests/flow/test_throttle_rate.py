"""Throttle and rate limit through a real scheduler on a fake clock: throttled triggers all run,
their starts spread over the period; rate-limited ones beyond the limit are dropped, recorded."""

from __future__ import annotations

from llamaherd.testing import wait_until

THROTTLED = """
webhooks = [{ source = "github", events = ["push"] }]
scale = 6

[flow]
throttle = { limit = 2, period = "10s" }
"""

RATE_LIMITED = """
webhooks = [{ source = "github", events = ["push"] }]
scale = 6

[flow]
rateLimit = { limit = 2, period = "10s" }
"""


def test_throttle_runs_every_trigger_with_starts_spaced_over_the_period(
    project, start, clock, runs_of, kit
):
    project.add_scripted_agent("deployer", THROTTLED)
    scheduler = start(project)
    for seq in range(6):
        kit.deliver(scheduler.url, kit.push("acme/widgets", seq))
    begun = clock.now
    for started in range(1, 7):
        # Two per 10 s, evenly: one start every 5 s of the clock, none sooner.
        wait_until(lambda n=started: len(runs_of(project)) == n, what=f"start {started}")
        assert len(runs_of(project)) == started
        stat = project.al("stat", "deployer", "--json", check=True).stdout
        if started < 6:
            assert "throttled_until" in stat
        clock.advance(5)
    starts = sorted(r.started_at - begun for r in runs_of(project))
    assert starts == [0, 5, 10, 15, 20, 25]
    wait_until(lambda: all(r.state == "done" for r in runs_of(project)))
    seqs = sorted(r.trigger["payload"]["payload"]["seq"] for r in runs_of(project))
    assert seqs == list(range(6)), "nothing dropped"


def test_rate_limit_drops_the_excess_and_records_it(project, start, clock, runs_of, kit):
    project.add_scripted_agent("notifier", RATE_LIMITED)
    scheduler = start(project)
    answers = [kit.deliver(scheduler.url, kit.push("acme/widgets", seq)).json() for seq in range(6)]
    assert [a["queued"] for a in answers] == [["notifier"]] * 2 + [[]] * 4
    assert answers[5]["flow"]["notifier"].startswith("dropped: rate limit: 2 per 10 s")
    wait_until(lambda: len([r for r in runs_of(project) if r.state == "done"]) == 2)
    dropped = kit.agent_events(project, "notifier", "trigger.dropped")
    assert len(dropped) == 4
    assert all("rate limit: 2 per 10 s" in e["data"]["reason"] for e in dropped)
    seqs = sorted(r.trigger["payload"]["payload"]["seq"] for r in runs_of(project))
    assert seqs == [0, 1], "the first two ran"
    table = project.al("runs", "notifier", check=True, env={"COLUMNS": "300"}).stdout
    assert table.count("dropped") == 4
    # The period goes on: one more is allowed every 5 s.
    clock.advance(5)
    kit.deliver(scheduler.url, kit.push("acme/widgets", 6))
    wait_until(lambda: len(runs_of(project)) == 3)

"""Several scheduler hosts on one PostgreSQL database (DESIGN §5, issue 11).

Each host is its own checkout of the project with ``database = "postgresql://..."`` and its own
AL_HOST_NAME, so liveness comes from heartbeats, as across machines. With real scheduler
processes: every queued item runs exactly once, ``scale`` holds across hosts, each cron tick
fires once, a host killed with SIGKILL is detected by its stale heartbeat and the others
reconcile its runs (interrupted, requeued once, nothing lost); `al kill` on any host stops the
run where it runs; a waiting run resumes on the host that holds its sandbox.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import OfflineProject, wait_until

pytestmark = pytest.mark.postgres

QUICK = """
[[turns]]
text = "done"
"""
HOSTS = ("host-a", "host-b", "host-c")
ITEMS = 1000
SCALE = 4
STALE_AFTER = 3.0
# A host heartbeats every second, so its heartbeat can look unchanged for up to a second less
# than STALE_AFTER when it dies.
HOUSEKEEPING_SLACK = 1.5


def checkout(root: Path, url: str) -> OfflineProject:
    """One host's copy of the project, naming the shared database."""
    project = OfflineProject(root, f'database = "{url}"\nworkQueueSize = {2 * ITEMS}\n')
    project.add_scripted_agent("work", f"scale = {SCALE}\n", QUICK)
    project.add_scripted_agent("tick", 'schedule = "* * * * *"\n', QUICK)
    return project


class ActiveSampler(threading.Thread):
    """Samples the number of ``running`` runs of an agent in the database, across all hosts."""

    def __init__(self, url: str, agent: str):
        super().__init__(daemon=True)
        from llamaherd.store import Store

        self.store, self.agent = Store.open(url), agent
        self.samples: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append(self.store.active_count(self.agent))
            time.sleep(0.01)
        self.store.close()

    def stop(self) -> list[int]:
        self.halt.set()
        self.join(10)
        return self.samples


class FakeClock:
    """The file AL_FAKE_CLOCK_FILE names: every host reads the same time from it."""

    def __init__(self, path: Path):
        self.path = path
        self.now = (time.time() // 60) * 60 + 30  # half-way through a minute
        self.path.write_text(repr(self.now))

    def next_minute(self) -> float:
        self.now += 60
        self.path.write_text(repr(self.now))
        return (self.now // 60) * 60


def fire_tick(clock: FakeClock, store: Any) -> float:
    """Move the clock into the next minute and wait for that tick's run to finish."""
    tick = clock.next_minute()

    def ran() -> bool:
        runs = store.runs(agent="tick", limit=100)
        return any(r.state == "done" and r.trigger["payload"].get("tick") == tick for r in runs)

    wait_until(ran, 30, what=f"the run of cron tick {tick}")
    return tick


def test_three_hosts_share_one_queue_and_survive_a_kill9(tmp_path, pg_url, scheduler):
    from llamaherd.store import Store

    store = Store.open(pg_url)
    store.set_paused(None, True)  # queue everything first, so all three hosts start together
    for n in range(ITEMS):
        assert store.enqueue("work", "manual", {"n": n}, limit=2 * ITEMS) is not None
    clock = FakeClock(tmp_path / "clock")
    schedulers = []
    for host in HOSTS:
        env = {
            "AL_FAKE_CLOCK_FILE": str(clock.path),
            "AL_HOST_STALE_AFTER": str(STALE_AFTER),
            # A distinct machine name per scheduler: liveness must come from the heartbeat,
            # not from this machine's process table.
            "AL_HOST_NAME": host,
        }
        schedulers.append(scheduler(checkout(tmp_path / host, pg_url), env))
    by_host = {f"{host}:{s.proc.pid}": s for host, s in zip(HOSTS, schedulers, strict=True)}
    sampler = ActiveSampler(pg_url, "work")
    sampler.start()
    store.set_paused(None, False)
    ticks = [fire_tick(clock, store)]

    def done_count() -> int:
        return store.stats("work")["states"].get("done", 0)

    wait_until(lambda: done_count() >= ITEMS // 3, 120, what="a third of the items done")

    def stat_hosts() -> set[str] | None:
        """The hosts `al stat` names for the work agent, when it names several."""
        stat = schedulers[0].project.al("stat", "--json", check=True)
        row = next(r for r in json.loads(stat.stdout)["agents"] if r["agent"] == "work")
        return set(row["hosts"]) if len(row["hosts"]) >= 2 else None

    assert wait_until(stat_hosts, 30, what="al stat to show several hosts") <= set(by_host)

    # Kill the host that runs the most right now; its runs stay `running` until its heartbeat
    # is stale, then the others interrupt and requeue them.
    def busiest() -> str | None:
        owners = collections.Counter(r.host for r in store.runs("work", ("running",), 100))
        host, count = owners.most_common(1)[0] if owners else (None, 0)
        return host if count >= 2 else None

    victim_host = wait_until(busiest, 30, what="a host with two runs at once")
    victim = by_host[victim_host]
    victim.kill9()
    killed_at = time.monotonic()
    # What the dead host left running: frozen from now on, until the others reconcile it;
    # with whether each had started its sandbox.
    orphans = {
        r.id: bool(r.sandbox)
        for r in store.runs("work", ("running",), 100)
        if r.host == victim_host
    }
    wait_until(
        lambda: all(store.get_run(run_id).state != "running" for run_id in orphans),
        STALE_AFTER + 20,
        what="the killed host's runs to be reconciled",
    )
    reconciled_after = time.monotonic() - killed_at
    ticks.append(fire_tick(clock, store))

    wait_until(lambda: done_count() == ITEMS, 150, what="every item done")
    ticks.append(fire_tick(clock, store))
    samples = sampler.stop()

    runs = store.runs(agent="work", limit=10 * ITEMS)
    done = collections.Counter(r.trigger["payload"]["n"] for r in runs if r.state == "done")
    assert sorted(done) == list(range(ITEMS)), "every item finished"
    assert max(done.values()) == 1, "no item finished twice"
    others = [r for r in runs if r.state != "done"]
    assert all((r.state, r.reason) == ("error", "interrupted") for r in others), others[:3]
    started = {run_id for run_id, sandbox in orphans.items() if sandbox}
    assert {r.id for r in others} == started, "exactly the killed host's started runs interrupted"
    # One it had claimed but not started did nothing yet: another host ran it as itself.
    assert all(store.get_run(run_id).state == "done" for run_id in set(orphans) - started)
    assert all(r.host == victim_host for r in others)
    tries = collections.Counter(r.trigger["payload"]["n"] for r in runs)
    assert max(tries.values()) <= 2, "an interrupted item is requeued once"
    assert orphans, "the kill should land while the victim runs something"
    assert reconciled_after >= STALE_AFTER - HOUSEKEEPING_SLACK, (
        f"reconciled {reconciled_after:.1f}s after the kill: before its heartbeat went stale"
    )
    assert {r.host for r in runs if r.state == "done"} == set(by_host), "all three hosts worked"
    assert max(samples) == SCALE, f"scale {SCALE} is reached and never exceeded across hosts"
    assert store.queue_depth().get("work", 0) == 0

    tick_runs = store.runs(agent="tick", limit=100)
    fired = collections.Counter(r.trigger["payload"]["tick"] for r in tick_runs)
    assert sorted(fired) == ticks and set(fired.values()) == {1}, "each tick fired exactly once"
    assert all(r.state == "done" for r in tick_runs)
    assert victim_host not in {h["host"] for h in store.hosts()}, "the dead host is forgotten"
    store.close()


# A session that never ends by itself: only a kill stops it, wherever the sandbox is.
ENDLESS = """
[[turns]]
loop = true
tool_calls = [{name = "bash", arguments = {command = "sleep 0.2"}}]
"""


def test_al_kill_on_one_host_stops_the_run_on_the_host_that_runs_it(tmp_path, pg_url, scheduler):
    from llamaherd.store import Store

    hosts = {}
    for name in HOSTS[:2]:
        project = OfflineProject(tmp_path / name, f'database = "{pg_url}"\n')
        project.add_scripted_agent("slow", "", ENDLESS)
        hosts[name] = scheduler(project, {"AL_HOST_NAME": name})
    store = Store.open(pg_url)
    store.enqueue("slow", "manual", {})
    run = wait_until(
        lambda: next(iter(store.runs("slow", ("running",), 1)), None), 30, what="a run"
    )
    owner = hosts[run.host.rpartition(":")[0]]
    other = next(s for s in hosts.values() if s is not owner)
    other.project.al("kill", run.id, check=True)
    # The owner stops it: told directly (its URL is in the hosts table) or, when that fails,
    # on seeing the run ended in the database.
    stopped = (f"run {run.id} of slow killed", f"run {run.id} was ended by another host")
    wait_until(lambda: any(s in owner.read_log() for s in stopped), 10, what="the owner to stop it")
    assert store.get_run(run.id).state == "killed"
    store.close()


# Parks once (the wait times out after a second and resumes it), then finishes.
WAITER = """
[[turns]]
tool_calls = [{name = "wait_for_trigger", arguments = {filter = {type = "agent", from = "nobody"}, timeout = "1s"}}]
[[turns]]
text = "done"
"""


# Until store.claim leaves a resume item to the live host that parked its run (change proposed
# to the store's owner), another host may take it: then it fails on separate machines ("the
# run's sandbox is gone"), and here, on one machine, it lands on the wrong host now and then.
def test_a_waiting_run_resumes_on_the_host_that_holds_its_sandbox(tmp_path, pg_url, scheduler):
    """Both hosts expire waits and claim resumes; only the parking host may continue a run."""
    from llamaherd.store import Store

    for name in HOSTS[:2]:
        project = OfflineProject(tmp_path / name, f'database = "{pg_url}"\n')
        project.add_scripted_agent("waiter", "scale = 8\n", WAITER)
        scheduler(project, {"AL_HOST_NAME": name})
    store = Store.open(pg_url)
    for _ in range(8):
        store.enqueue("waiter", "manual", {})
    parked_on: dict[str, str] = {}

    def all_done() -> bool:
        runs = store.runs("waiter", limit=20)
        parked_on.update({r.id: r.host for r in runs if r.state == "waiting"})
        return len(runs) == 8 and all(r.state == "done" for r in runs)

    wait_until(all_done, 60, what="every run to wait, resume and finish")
    finished_on = {r.id: r.host for r in store.runs("waiter", limit=20)}
    assert len(parked_on) == 8, "every run parked"
    assert finished_on == parked_on, "each run resumed where its sandbox is"
    store.close()

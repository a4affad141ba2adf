"""Every timer of flow control on the real clock, with an otherwise idle scheduler: no fake
clock, and no other delivery, call or request to wake it. Windows are short (2-3 s); each start
is checked against the moment it was due (within 0.5 s). On SQLite with one scheduler, and on
PostgreSQL with two sharing the database (deliveries alternate between them)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from llamaherd.status import key_line
from llamaherd.testing import settled, thread_switches, wait_until

ON_TIME = 0.5  # seconds a start may come after the moment it was due

DEBOUNCED = """
webhooks = [{ source = "github", events = ["push"] }]
scale = 10

[flow]
key = "repository.full_name"
debounce = { period = "2s" }
"""
THROTTLED = """
webhooks = [{ source = "github", events = ["push"] }]
scale = 4

[flow]
throttle = { limit = 2, period = "4s" }
"""
BATCHED = """
webhooks = [{ source = "github", events = ["push"] }]

[flow]
batch = { maxSize = 10, timeout = "3s" }
"""


SQLITE, POSTGRES = "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)
POSTGRES_ALONE = pytest.param("postgres-alone", marks=pytest.mark.postgres)


@pytest.fixture(params=[SQLITE, POSTGRES])
def herd(request, tmp_path, credentials, start, kit):
    """``herd(agents)``: (projects, schedulers) on the real clock: one scheduler on SQLite, or
    two on one PostgreSQL database (one checkout each; ``postgres-alone``: one)."""

    def make(agents):
        if request.param == "sqlite":
            project = kit.flow_project(tmp_path / "project", None, credentials)
            for name, config, script in agents:
                project.add_scripted_agent(name, config, script=script)
            projects = [project]
        else:
            url = request.getfixturevalue("pg_url")
            hosts = 1 if request.param == "postgres-alone" else 2
            projects = kit.checkouts(tmp_path, None, credentials, url, agents=agents, hosts=hosts)
        return projects, [start(project) for project in projects]

    return make


def deliver_all(kit, hosts, payloads) -> float:
    """Deliver each payload (a push) in order, alternating between ``hosts``; when the last
    was acknowledged (epoch seconds)."""
    for index, payload in enumerate(payloads):
        kit.deliver(hosts[index % len(hosts)].url, payload)
    return time.time()


class StatSampler(threading.Thread):
    """Asks the scheduler for what `al stat AGENT` shows (``/control/stat``, whose rows `al
    stat` draws) over and over, keeping (when it asked, the agent's key lines as drawn)."""

    def __init__(self, scheduler, agent: str):
        super().__init__(daemon=True)
        self.scheduler, self.agent = scheduler, agent
        self.samples: list[tuple[float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            asked = time.time()
            stat = self.scheduler.get("/control/stat").json()
            [row] = [row for row in stat["agents"] if row["agent"] == self.agent]
            keys = (row.get("flow") or {}).get("keys", [])
            lines = "\n".join(key_line(key, stat["now"]) for key in keys)
            self.samples.append((asked, lines))
            self.halt.wait(0.05)

    def stop(self) -> list[tuple[float, str]]:
        self.halt.set()
        self.join(30)
        return self.samples


def test_debounce_runs_when_the_quiet_window_closes(herd, kit, runs_of):
    projects, hosts = herd([("builder", DEBOUNCED, None)])
    sampler = StatSampler(hosts[0], "builder")
    sampler.start()
    last = deliver_all(kit, hosts, [kit.push("acme/widgets", seq) for seq in range(3)])
    [run] = wait_until(lambda: runs_of(projects[0]) or None, timeout=15, what="the run")
    wait_until(lambda: any(at > run.created_at + ON_TIME for at, _ in sampler.samples), 15)
    samples = sampler.stop()
    assert last + 2 - 0.05 <= run.created_at <= last + 2 + ON_TIME, run.created_at - last
    assert run.trigger["flow"]["count"] == 3
    assert run.trigger["payload"]["payload"]["seq"] == 2
    pending = [at for at, text in samples if "debouncing" in text]
    assert pending, f"al stat showed the pending window: {samples}"
    assert all(at < run.created_at + ON_TIME for at in pending), "shown pending after it fired"
    assert not [text for _, text in samples if "fires in 0s" in text]


def test_throttle_spreads_starts_over_the_period(herd, kit, runs_of):
    projects, hosts = herd([("deployer", THROTTLED, None)])
    first = time.time()
    deliver_all(kit, hosts, [kit.push("acme/widgets", seq) for seq in range(4)])
    runs = wait_until(lambda: len(runs_of(projects[0])) == 4 and runs_of(projects[0]), 20)
    starts = sorted(run.created_at - first for run in runs)
    # Two per 4 s, evenly: one start every 2 s, none sooner, each on time.
    for index, started in enumerate(starts):
        assert 2 * index - 0.05 <= started <= 2 * index + ON_TIME, starts
    seqs = sorted(run.trigger["payload"]["payload"]["seq"] for run in runs)
    assert seqs == [0, 1, 2, 3], "nothing dropped"


def test_batch_timeout_runs_a_partial_batch(herd, kit, runs_of):
    projects, hosts = herd([("collector", BATCHED, None)])
    first = time.time()
    deliver_all(kit, hosts, [kit.push("acme/widgets", seq) for seq in range(5)])
    [run] = wait_until(lambda: runs_of(projects[0]) or None, timeout=15, what="the batch")
    assert first + 3 - 0.05 <= run.created_at <= first + 3 + ON_TIME, run.created_at - first
    assert sorted(m["payload"]["payload"]["seq"] for m in run.trigger["flow"]["batch"]) == [
        0, 1, 2, 3, 4,
    ]  # fmt: skip
    assert len(runs_of(projects[0])) == 1


def test_kill_9_in_a_debounce_window_runs_once_a_period_after_the_restart(
    herd, kit, runs_of, start
):
    projects, hosts = herd([("builder", DEBOUNCED, None)])
    deliver_all(kit, hosts[:1], [kit.push("acme/widgets", seq) for seq in range(3)])
    hosts[0].kill9()
    start(projects[0])
    restarted = time.time()
    [run] = wait_until(lambda: runs_of(projects[0]) or None, timeout=15, what="the run")
    assert run.created_at <= restarted + 2 + 1, run.created_at - restarted
    assert run.trigger["flow"]["count"] == 3
    wait_until(lambda: runs_of(projects[0])[0].state == "done", what="the run done")
    store = projects[0].store()
    try:
        wait_until(lambda: store.queue_depth() == {}, what="the queue empty")
    finally:
        store.close()
    assert len(runs_of(projects[0])) == 1


@pytest.mark.parametrize("herd", [SQLITE, POSTGRES_ALONE, POSTGRES], indirect=True)
def test_interleaved_bursts_on_many_keys_run_once_per_key(herd, kit, runs_of):
    """5 keys x 20 interleaved deliveries, 20 bursts (each its own keys, so they overlap in
    time: claims of closing windows race the folds of later bursts), from 8 senders."""
    config = DEBOUNCED.replace('period = "2s"', 'period = "3s"')
    projects, hosts = herd([("builder", config, None)])
    payloads = [
        kit.push(f"burst{burst}/key{key}", seq)
        for burst in range(20)
        for seq in range(20)
        for key in range(5)
    ]
    with ThreadPoolExecutor(8) as senders:
        list(
            senders.map(
                lambda item: kit.deliver(hosts[item[0] % len(hosts)].url, item[1]),
                enumerate(payloads),
            )
        )
    runs = wait_until(
        lambda: (
            (found := runs_of(projects[0]))
            and all(r.state == "done" for r in found)
            and len(found) >= 100
            and found
        ),
        timeout=120,
        what="100 debounced runs done",
    )
    keys = [run.trigger["payload"]["payload"]["repository"]["full_name"] for run in runs]
    assert sorted(keys) == sorted({p["repository"]["full_name"] for p in payloads})
    assert {run.trigger["flow"]["count"] for run in runs} == {20}


def test_an_idle_scheduler_with_200_debounced_agents_does_not_wake(
    tmp_path, credentials, start, kit
):
    project = kit.flow_project(tmp_path / "project", None, credentials)
    for index in range(200):
        project.add_scripted_agent(f"agent{index:03}", DEBOUNCED)
    scheduler = start(project)
    wait_until(lambda: scheduler.read_log().count(": ready") == 200, what="200 agents ready")
    # Its start is over (the config watcher saw its log written in the project folder).
    assert settled(scheduler.proc.pid), "the scheduler never went quiet"
    before = thread_switches(scheduler.proc.pid)
    time.sleep(10)  # the window measured, not a wait for something to happen
    assert thread_switches(scheduler.proc.pid) == before, "a thread woke with nothing due"

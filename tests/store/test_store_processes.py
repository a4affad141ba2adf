"""Several real processes on one database: no double claim, scale holds, commits survive kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from llamaherd.store import Store

WORKER = str(Path(__file__).with_name("worker.py"))


def workers(url: str, n: int, *args: str, go: Path) -> list[list[int]]:
    """Run n claim workers that start at the same moment; each one's claimed item ids."""
    env = {**os.environ, "AL_TEST_GO_FILE": str(go)}
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, url, *args], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdout.readline() == "ready\n"
    go.touch()
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        out.append([int(line) for line in stdout.split()])
    return out


def test_no_item_is_claimed_twice(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    agents = [f"agent{n}" for n in range(4)]
    ids = [store.enqueue(agents[n % 4], "webhook", {"n": n}, limit=1000) for n in range(400)]
    claimed = [
        i
        for got in workers(db_url, 4, "claim", ",".join(agents), "1000", "0", go=tmp_path / "go")
        for i in got
    ]
    assert sorted(claimed) == sorted(ids)
    runs = store.runs(limit=1000)
    assert len(runs) == 400 and {r.state for r in runs} == {"done"}
    assert len({r.host for r in runs}) > 1  # the work really was shared


def test_scale_holds_across_processes(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    for n in range(30):
        store.enqueue("alpha", "webhook", {"n": n})
    workers(db_url, 4, "claim", "alpha", "2", "0.01", go=tmp_path / "go")
    runs = store.runs(limit=100)
    assert len(runs) == 30
    # Sweep the runs' [started, finished] intervals: at no instant were more than 2 running.
    edges = sorted([(r.started_at, 1) for r in runs] + [(r.finished_at, -1) for r in runs])
    active = peak = 0
    for _, step in edges:
        active += step
        peak = max(peak, active)
    assert peak <= 2


def test_committed_items_survive_kill_9(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/.al/work-queue.db"
    Store.open(url).close()
    proc = subprocess.Popen(
        [sys.executable, WORKER, url, "enqueue", "alpha", "100000"],
        stdout=subprocess.PIPE,
        text=True,
    )
    acknowledged = [int(proc.stdout.readline()) for _ in range(300)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    acknowledged += [int(line) for line in proc.stdout.read().split()]
    store = Store.open(url)
    assert store._db.execute_sql("PRAGMA integrity_check").fetchone() == ("ok",)
    queued = {item_id for (item_id,) in store._db.execute_sql("SELECT id FROM work_items")}
    assert set(acknowledged) <= queued


def test_threads_share_one_store(db_url: str) -> None:
    store = Store.open(db_url)
    claimed: list[int] = []

    def produce(agent: str) -> None:
        for n in range(50):
            store.enqueue(agent, "webhook", {"n": n})

    def consume() -> None:
        idle = 0
        while idle < 50:
            got = store.claim({"a": 100, "b": 100}, None, "threads")
            if got is None:
                idle += 1
                time.sleep(0.002)
                continue
            idle = 0
            claimed.append(got[0].id)
            store.transition(got[1].id, "done")

    threads = [threading.Thread(target=produce, args=(agent,)) for agent in ("a", "b")]
    threads += [threading.Thread(target=consume) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(claimed) == len(set(claimed)) == 100


def test_each_cron_tick_is_claimed_once(db_url: str) -> None:
    store = Store.open(db_url)
    wins: list[float] = []

    def scheduler() -> None:
        for tick in range(20):
            if store.claim_tick("cron", float(tick)):
                wins.append(float(tick))

    threads = [threading.Thread(target=scheduler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(wins) == [float(tick) for tick in range(20)]

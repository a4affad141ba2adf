"""The scheduler as a real process: durability across kill -9, queue bound, scale, timeout,
locks, and refusals of bad input."""

from __future__ import annotations

import collections
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject, wait_until

QUICK = """
[[turns]]
text = "done"
"""


def runs_by_state(store, agent=None):
    return collections.Counter(run.state for run in store.runs(agent=agent, limit=100_000))


def test_kill9_mid_work_loses_nothing_and_runs_nothing_twice(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", "workQueueSize = 2000\n")
    project.add_scripted_agent("quick", "scale = 4\n", QUICK)
    sched = scheduler(project)
    project.al("pause", check=True)
    for n in range(1000):
        response = sched.post("/control/run", {"agent": "quick", "payload": {"n": n}})
        assert response.status_code == 202, response.text
    project.al("resume", check=True)
    store = project.store()
    wait_until(lambda: runs_by_state(store)["done"] >= 150, timeout=120)
    sched.kill9()
    assert store.queue_depth().get("quick", 0) > 0, "the kill should land mid-work"

    scheduler(project)
    wait_until(
        lambda: (
            store.queue_depth().get("quick", 0) == 0
            and not store.runs(states=("running",), limit=10)
        ),
        timeout=240,
    )
    done = collections.Counter(
        run.trigger["payload"]["n"]
        for run in store.runs(agent="quick", limit=100_000)
        if run.state == "done"
    )
    assert sorted(done) == list(range(1000)), "every item finished"
    assert max(done.values()) == 1, "no item finished twice"


def test_queue_bound_keeps_newest_and_records_drops(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", "workQueueSize = 100\n")
    project.add_scripted_agent("busy", "", QUICK)
    sched = scheduler(project)
    project.al("pause", "busy", check=True)
    for n in range(150):
        assert sched.post("/control/run", {"agent": "busy", "payload": {"n": n}}).status_code == 202
    store = project.store()
    assert store.queue_depth()["busy"] == 100
    dropped = [e for e in store.agent_events("busy", limit=1000) if e["type"] == "dropped"]
    assert len(dropped) == 50
    project.al("resume", "busy", check=True)
    wait_until(lambda: runs_by_state(store, "busy")["done"] == 100, timeout=120)
    kept = sorted(run.trigger["payload"]["n"] for run in store.runs(agent="busy", limit=1000))
    assert kept == list(range(50, 150)), "the newest 100 ran, FIFO"


def test_scale_caps_concurrent_runs(project, scheduler):
    project.add_scripted_agent(
        "wide",
        "scale = 3\n",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 0.4"}}]
        [[turns]]
        text = "slept"
    """,
    )
    sched = scheduler(project)
    for _ in range(10):
        assert sched.post("/control/run", {"agent": "wide"}).status_code == 202
    store = project.store()
    wait_until(lambda: runs_by_state(store, "wide")["done"] == 10, timeout=120)
    assert most_at_once(store.runs(agent="wide", limit=100)) == 3


def most_at_once(runs) -> int:
    """The most runs active at one instant, by their recorded start and finish times."""
    edges = sorted([(r.started_at, 1) for r in runs] + [(r.finished_at, -1) for r in runs])
    active = most = 0
    for _, step in edges:  # at equal times a finish (-1) sorts first: back-to-back runs
        active += step
        most = max(most, active)
    return most


def test_timeout_kills_the_whole_tree(project, scheduler, tmp_path):
    pidfile = tmp_path / "pids"
    project.add_scripted_agent(
        "sleepy",
        "timeout = 2\n",
        f"""
        [[turns]]
        tool_calls = [{{name = "bash", arguments = {{command = "(sleep 300 & echo $! >> {pidfile}; wait) & echo $! >> {pidfile}; sleep 300"}}}}]
        [[turns]]
        text = "never"
    """,
    )
    result = project.al("run", "sleepy", timeout=60)
    assert result.returncode == 124, result.stdout + result.stderr
    run = project.store().runs(agent="sleepy", limit=1)[0]
    assert (run.state, run.exit_code) == ("timeout", 124)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert pids

    def dead(pid: int) -> bool:  # a zombie at most
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_until(lambda: all(dead(pid) for pid in pids), timeout=10, what="the tree to be dead")


def test_locks_contend_report_holder_and_release_on_kill(project, scheduler, tmp_path):
    out = tmp_path / "lock"
    project.add_scripted_agent(
        "locker",
        "scale = 2\n",
        f"""
        [[turns]]
        tool_calls = [{{name = "bash", arguments = {{command = "rlock repo://shared > {out}-$AL_RUN_ID; sleep 60"}}}}]
        [[turns]]
        text = "done"
    """,
    )
    sched = scheduler(project)
    store = project.store()
    sched.post("/control/run", {"agent": "locker"})
    # The shell creates the file before rlock answers: wait for the answer before the second
    # run starts, or the second may take the lock first.
    first = wait_until(lambda: [p for p in tmp_path.glob("lock-*") if p.read_text()], timeout=60)[0]
    holder = first.name.removeprefix("lock-")
    sched.post("/control/run", {"agent": "locker"})
    second = wait_until(
        lambda: [p for p in tmp_path.glob("lock-*") if p != first and p.read_text()], timeout=60
    )[0]
    import json

    assert json.loads(wait_until(first.read_text, timeout=60))["ok"] is True
    refused = json.loads(second.read_text())
    assert refused["ok"] is False and refused["holder"] == holder
    assert sched.post("/control/kill", {"target": holder}).json()["killed"] == [holder]
    wait_until(lambda: store.get_run(holder).state == "killed", timeout=60)
    assert all(lock["run_id"] != holder for lock in store.locks())


def test_bad_input_is_refused_clearly(project, scheduler):
    project.add_scripted_agent("quick", "", QUICK)
    result = project.al("run", "nope")
    assert (
        result.returncode == 2
        and "no such agent" in result.stderr
        and "Traceback" not in result.stderr
    )
    result = project.al("logs", "does-not-exist")
    assert result.returncode == 2 and "no such run" in result.stderr
    sched = scheduler(project)
    assert sched.post("/control/run", {"agent": "nope"}).status_code == 400
    second = project.al("start", timeout=30)
    assert second.returncode == 1 and "already running" in second.stderr
    assert sched.get("/control/health").json()["ok"] is True
    assert project.al("run", "quick").returncode == 0


def test_control_calls_need_the_token(project, scheduler):
    import requests

    project.add_scripted_agent("quick", "", QUICK)
    sched = scheduler(project)
    assert (
        requests.post(sched.url + "/control/run", json={"agent": "quick"}, timeout=10).status_code
        == 401
    )
    assert (
        requests.post(
            sched.url + "/control/run",
            json={"agent": "quick"},
            headers={"Authorization": "Bearer wrong"},
            timeout=10,
        ).status_code
        == 401
    )
    # Reads too: being on 127.0.0.1 proves nothing (issue 18 item 4).
    assert requests.get(sched.url + "/control/stat", timeout=10).status_code == 401
    assert sched.get("/control/stat").status_code == 200
    assert oct(os.stat(project.root / ".al" / "control-token").st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("damage", ["corrupt", "readonly"])
def test_damaged_database_gives_one_clear_line(project, damage):
    project.add_scripted_agent("quick", "", QUICK)
    assert project.al("stat").returncode == 0
    db = project.root / ".al" / "work-queue.db"
    if damage == "corrupt":
        for extra in ("-wal", "-shm"):
            db.with_name(db.name + extra).unlink(missing_ok=True)
        db.write_bytes(b"this is not a database" * 100)
    else:
        # Root ignores permission bits, so make the file and its dir immutable instead.
        sqlite3.connect(db).close()
        subprocess.run(["chattr", "+i", str(db), str(db.parent)], check=True)
    try:
        result = project.al("run", "quick")
    finally:
        subprocess.run(["chattr", "-i", str(db), str(db.parent)], check=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "work-queue.db" in result.stderr

"""The pool's tables on a real store (SQLite and PostgreSQL): leases never exceed a host's
capacity, even when several stores race for the last slot; stale leases are taken back; the
admission check holds an agent only while every host is full or down."""

from __future__ import annotations

import threading

import pytest
from llamaherd_ssh.pool import RETRY_DOWN_AFTER, TABLES, Pool, PoolAdmission
from llamaherd_ssh.settings import Host

from llamaherd.api import Hold, SshTarget, Store


def host(name: str, capacity: int | None = 1) -> Host:
    return Host(SshTarget(name, "agent"), "~", capacity)


def running(store: Store, agent: str = "worker") -> str:
    store.enqueue(agent, "manual", {})
    _, run = store.claim({agent: 100}, None, "h")
    return run.id


def test_least_loaded_first_and_never_over_capacity(database_url) -> None:
    store = Store.open(database_url, tables=[TABLES])
    try:
        pool = Pool(store)
        big, small = host("big", 2), host("small", 1)
        placed = [pool.lease([big, small], running(store), "worker") for _ in range(4)]
        assert [h.key if h else None for h in placed] == [
            "agent@big", "agent@small", "agent@big", None,
        ]  # fmt: skip
        assert pool.blocked([big, small]) == Hold(
            "every host of its pool is full or down (agent@big 2/2, agent@small 1/1)"
        ), "full hosts: no moment to try again (a run's end frees a slot)"
    finally:
        store.close()


def test_racing_stores_take_each_slot_once(database_url) -> None:
    stores = [Store.open(database_url, tables=[TABLES]) for _ in range(4)]
    try:
        target = host("one", 2)
        runs = [running(stores[0]) for _ in range(8)]
        won: list[str] = []
        barrier = threading.Barrier(8)

        def race(index: int) -> None:
            barrier.wait()
            if Pool(stores[index % 4]).lease([target], runs[index], "worker") is not None:
                won.append(runs[index])

        threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(won) == 2
    finally:
        for store in stores:
            store.close()


def test_slots_of_ended_runs_are_taken_back_and_down_hosts_hold(database_url) -> None:
    store = Store.open(database_url, tables=[TABLES])
    try:
        pool, only = Pool(store), host("only", 1)
        first = running(store)
        assert pool.lease([only], first, "worker") == only
        assert pool.blocked([only]) is not None
        store.transition(first, "error", reason="interrupted")  # its scheduler died
        assert pool.blocked([only]) is None  # an ended run's lease does not count
        assert pool.lease([only], running(store), "worker") == only  # and is taken back
        other = host("other", 1)
        pool.mark(other.key, "ssh agent@other: unreachable: connection refused")
        marked = store.clock()
        blocked = pool.blocked([only, other])
        assert blocked.reason == (
            "every host of its pool is full or down (agent@only 1/1, agent@other down)"
        )
        assert blocked.until == pytest.approx(marked + RETRY_DOWN_AFTER, abs=1), "tried again then"
        pool.mark(other.key, None)
        assert pool.blocked([only, other]) is None
        [view] = pool.views([other])
        assert view.up is True and view.error is None
    finally:
        store.close()


def test_the_admission_check_speaks_only_for_pools(tmp_project, database_url) -> None:
    tmp_project.add_agent("single", '[runtime]\ntype = "ssh"\nhost = "a"\n')
    tmp_project.add_agent(
        "pool", '[runtime]\ntype = "ssh"\nhosts = [{ host = "a" }, { host = "b" }]\n'
    )
    tmp_project.add_agent("other", '[runtime]\ntype = "host-user"\n')
    project = tmp_project.load()
    store = Store.open(database_url, tables=[TABLES])
    try:
        check = PoolAdmission()
        pool = Pool(store)
        for name in ("a", "b"):
            pool.mark(f"{name}", "ssh b: unreachable: no route to host")
        assert check.hold(project.agent("single"), store, 0) is None
        assert check.hold(project.agent("other"), store, 0) is None
        assert check.hold(project.agent("pool"), store, 0).reason == (
            "every host of its pool is full or down (a down, b down)"
        )
    finally:
        store.close()

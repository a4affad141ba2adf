"""Claim throughput with 1, 2 and 4 scheduler processes on PostgreSQL, beside SQLite's.

Each measurement gets a fresh database (a new schema on the PostgreSQL server), N items queued
for 8 agents, then P processes claim concurrently until the queue is empty, each marking its run
done at once (a dispatcher's cycle; every claim and every transition is its own committed
transaction). The figure is claims per second of wall time, from all processes starting
together to the queue being empty. PostgreSQL's URL: --url, else AL_TEST_POSTGRES_URL (start a
server with ``bash .ci/postgres.sh``); without one only SQLite is measured.

    python bench/claim_throughput_postgres.py [--items N] [--url postgresql://...]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from llamaherd.store import Store
from llamaherd.testing import postgres_schema

AGENTS = [f"agent{i}" for i in range(8)]
PROCESSES = (1, 2, 4)


def worker(url: str, barrier: mp.Barrier, results: mp.Queue) -> None:
    store = Store.open(url)
    scales = dict.fromkeys(AGENTS, 1000)
    host = f"bench:{os.getpid()}"
    claimed = 0
    barrier.wait()
    while (got := store.claim(scales, None, host)) is not None:
        store.transition(got[1].id, "done")
        claimed += 1
    results.put((claimed, time.perf_counter()))


def measure(url: str, items: int, processes: int) -> float:
    store = Store.open(url)
    for n in range(items):
        store.enqueue(AGENTS[n % len(AGENTS)], "webhook", {"n": n}, limit=items)
    store.close()
    barrier, results = mp.Barrier(processes + 1), mp.Queue()
    procs = [mp.Process(target=worker, args=(url, barrier, results)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    barrier.wait()
    start = time.perf_counter()
    done = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    assert sum(count for count, _ in done) == items, "every item claimed exactly once"
    return items / (max(end for _, end in done) - start)


@contextmanager
def sqlite_db() -> Iterator[tuple[str, str]]:
    """(unused name, URL) of a throwaway SQLite database: the shape of postgres_schema."""
    with tempfile.TemporaryDirectory() as root:
        yield root, f"sqlite:///{root}/.al/work-queue.db"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--url", default=os.environ.get("AL_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    mp.set_start_method("fork")
    backends = {"sqlite": sqlite_db}
    if args.url:
        backends = {"postgresql": lambda: postgres_schema(args.url, "bench_"), **backends}
    figures = {}
    for name, database in backends.items():
        for processes in PROCESSES:
            with database() as (_schema, url):
                rate = measure(url, args.items, processes)
            figures[name, processes] = rate
            print(f"{name:10} {processes} process(es): {rate:7,.0f} claims/s")
    print(
        "claim throughput, claims/s with 1/2/4 processes: "
        + "; ".join(
            f"{name} " + "/".join(f"{figures[name, p]:,.0f}" for p in PROCESSES)
            for name in backends
        )
    )


if __name__ == "__main__":
    main()

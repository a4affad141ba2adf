"""Durable enqueue + claim throughput of the SQLite store from one producer thread (items per
second).

Every transaction is committed durably (WAL, synchronous=NORMAL: each committed item survives a
killed process), as the scheduler does it. Items go to 5 agents in rounds of ``--batch``: the
round is enqueued with one ``enqueue_many`` (one transaction) and claimed with one
``claim_many`` (one transaction: as the dispatcher does when that many slots are free);
``--batch 1`` is one ``enqueue`` and one ``claim`` per item. Each claimed run is then marked
done (timed apart, reported on its own line) so the running set stays as small as in a real
scheduler. The work is CPU-bound (no fsync per commit), so besides wall-clock rates it reports
items per CPU-second of this process, which is what an otherwise idle core gives when the
machine is shared.

    python bench/queue_throughput.py [--items N] [--batch N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from llamaherd.store import Store

AGENTS = [f"agent{i}" for i in range(5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        store = Store.open("sqlite:///.al/work-queue.db", root)
        scales = dict.fromkeys(AGENTS, args.batch)
        spent = {"enqueue": 0.0, "claim": 0.0, "done": 0.0}
        cpu = {"enqueue": 0.0, "claim": 0.0}
        done = 0
        while done < args.items:
            size = min(args.batch, args.items - done)
            items = [
                {"agent": AGENTS[n % len(AGENTS)], "kind": "webhook", "payload": {"n": done + n},
                 "prompt": "event"}
                for n in range(size)
            ]  # fmt: skip
            start, start_cpu = time.perf_counter(), time.process_time()
            if size == 1:
                store.enqueue(**items[0])
            else:
                store.enqueue_many(items)
            spent["enqueue"] += time.perf_counter() - start
            cpu["enqueue"] += time.process_time() - start_cpu
            start, start_cpu = time.perf_counter(), time.process_time()
            claimed = store.claim_many(scales, None, "bench", limit=size)
            spent["claim"] += time.perf_counter() - start
            cpu["claim"] += time.process_time() - start_cpu
            assert len(claimed) == size
            start = time.perf_counter()
            for _, run in claimed:
                store.transition(run.id, "done")
            spent["done"] += time.perf_counter() - start
            done += size
        assert store.queue_depth() == {} and store.active_count() == 0
        store.close()
    for name, seconds in spent.items():
        print(f"{name}: {args.items / seconds:,.0f}/s ({seconds * 1e6 / args.items:.0f} us each)")
    cycle = args.items / sum(spent.values())
    print(f"full cycle (enqueue + claim + done): {cycle:,.0f} items/s")
    wall = args.items / (spent["enqueue"] + spent["claim"])
    per_cpu = args.items / (cpu["enqueue"] + cpu["claim"])
    one, five, _ = os.getloadavg()
    print(
        f"durable enqueue+claim throughput (SQLite, batches of {args.batch}): {wall:,.0f} "
        f"items/s wall, {per_cpu:,.0f} items per CPU-second (load average {one:.1f}/{five:.1f})"
    )


if __name__ == "__main__":
    main()

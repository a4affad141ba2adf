"""Durable enqueue + claim throughput of the SQLite store (items per second).

Every enqueue and every claim is its own committed transaction (WAL, synchronous=NORMAL: each
committed item survives a killed process), as the scheduler does it. Items go to 5 agents in
rounds of 100; each claimed run is then marked done (timed apart, reported on its own line) so
the running set stays as small as in a real scheduler. The work is CPU-bound (no fsync per
commit), so besides wall-clock rates it reports items per CPU-second of this process, which is
what an otherwise idle core gives when the machine is shared.

    python bench/queue_throughput.py [--items N]
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        store = Store.open("sqlite:///.al/work-queue.db", root)
        scales = dict.fromkeys(AGENTS, 100)
        spent = {"enqueue": 0.0, "claim": 0.0, "done": 0.0}
        cpu = {"enqueue": 0.0, "claim": 0.0}
        done = 0
        while done < args.items:
            batch = min(100, args.items - done)
            start, start_cpu = time.perf_counter(), time.process_time()
            for n in range(batch):
                store.enqueue(AGENTS[n % len(AGENTS)], "webhook", {"n": done + n}, "event")
            spent["enqueue"] += time.perf_counter() - start
            cpu["enqueue"] += time.process_time() - start_cpu
            for _ in range(batch):
                start, start_cpu = time.perf_counter(), time.process_time()
                _, run = store.claim(scales, None, "bench")
                spent["claim"] += time.perf_counter() - start
                cpu["claim"] += time.process_time() - start_cpu
                start = time.perf_counter()
                store.transition(run.id, "done")
                spent["done"] += time.perf_counter() - start
            done += batch
        assert store.queue_depth() == {} and store.active_count() == 0
        store.close()
    for name, seconds in spent.items():
        print(f"{name}: {args.items / seconds:,.0f}/s ({seconds * 1e6 / args.items:.0f} us each)")
    cycle = args.items / sum(spent.values())
    print(f"full cycle (enqueue + claim + done): {cycle:,.0f} items/s")
    wall = args.items / (spent["enqueue"] + spent["claim"])
    per_cpu = args.items / (cpu["enqueue"] + cpu["claim"])
    print(
        f"durable enqueue+claim throughput (SQLite): {wall:,.0f} items/s wall, "
        f"{per_cpu:,.0f} items per CPU-second (load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()

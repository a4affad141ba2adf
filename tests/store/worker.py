"""A separate process working one store, for the multi-process tests.

worker.py URL claim AGENTS SCALE HOLD   claim until the queue is empty; each claimed item id
                                        is printed, the run held HOLD seconds, then done
worker.py URL enqueue AGENT N           enqueue N items, printing each id once committed
"""

from __future__ import annotations

import os
import sys
import time

from llamaherd.store import Store


def claim(store: Store, agents: list[str], scale: int, hold: float) -> None:
    scales = dict.fromkeys(agents, scale)
    host = f"worker:{os.getpid()}"
    while True:
        claimed = store.claim(scales, None, host)
        if claimed is None:
            if not store.queue_depth():
                return
            time.sleep(0.002)  # everything left is held by other workers' running runs
            continue
        item, run = claimed
        print(item.id, flush=True)
        time.sleep(hold)
        store.transition(run.id, "done")


def enqueue(store: Store, agent: str, count: int) -> None:
    for n in range(count):
        print(store.enqueue(agent, "webhook", {"n": n}, limit=count + 1), flush=True)


def main() -> None:
    url, mode, *rest = sys.argv[1:]
    store = Store.open(url)
    go = os.environ.get("AL_TEST_GO_FILE")
    if go:  # start together with the other workers: report ready, wait for the go file
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.005)
    if mode == "claim":
        claim(store, rest[0].split(","), int(rest[1]), float(rest[2]))
    else:
        enqueue(store, rest[0], int(rest[1]))


if __name__ == "__main__":
    main()

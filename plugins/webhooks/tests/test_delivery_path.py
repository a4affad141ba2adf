"""What one delivery costs the store: the waiting runs' filters are read once however many
agents it goes to, and a paused agent's item wakes no dispatcher (issue 43, the delivery path).

The statements are those SQLite runs on the store's writer connection (its trace callback):
what the database was asked, not a count of calls to our own functions."""

from __future__ import annotations

import threading

import requests

from llamaherd.api import Engine, TriggerEvent

WAIT_FILTERS = "SELECT id, agent, wait_filter FROM runs WHERE state = 'waiting'"


def test_a_delivery_to_20_agents_reads_the_waiting_runs_once(tmp_project) -> None:
    tmp_project.config('[webhooks.open]\ntype = "generic"\nallowUnsigned = true\n')
    for i in range(20):
        tmp_project.add_agent(f"taker-{i:02d}", '[[webhooks]]\nsource = "open"\n')
    engine = Engine(tmp_project.load())
    engine.serve("127.0.0.1", 0)
    statements: list[str] = []
    try:
        # On the writer's own connection: every delivery's write runs there.
        engine.store.write(
            lambda: engine.store._db.connection().set_trace_callback(statements.append)
        )
        answer = requests.post(
            f"{engine.gateway_url}/webhooks/open", json={"n": 1}, headers={"X-Event": "x"},
            timeout=30,
        )  # fmt: skip
        assert answer.status_code == 202 and len(answer.json()["queued"]) == 20
        assert sum(WAIT_FILTERS in sql for sql in statements) == 1
    finally:
        engine.close()


class Wakes(threading.Event):
    """An engine's ``wakeup`` counting its ``set`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def set(self) -> None:
        self.count += 1
        super().set()


def test_an_item_of_a_paused_agent_wakes_no_dispatcher(tmp_project) -> None:
    tmp_project.add_agent("taker")
    engine = Engine(tmp_project.load())
    try:
        engine.wakeup = wakes = Wakes()
        engine.store.set_paused("taker", True)
        engine.store.paused()  # the dispatcher's look at what is paused
        engine.store.write(engine.emit, TriggerEvent(agent="taker", kind="webhook", payload={}))
        assert wakes.count == 0 and engine.store.queue_depth() == {"taker": 1}
        engine.store.set_paused("taker", False)  # `al resume` wakes it itself, and then...
        engine.store.write(engine.emit, TriggerEvent(agent="taker", kind="webhook", payload={}))
        assert wakes.count == 1  # ...an item of a resumed agent wakes it
        engine.store.set_paused(None, True)  # the whole scheduler
        engine.store.paused()
        engine.emit(TriggerEvent(agent="taker", kind="manual", payload={}))
        assert wakes.count == 1
    finally:
        engine.close()

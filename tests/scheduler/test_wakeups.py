"""Wake-ups, not ticks: the dispatcher is woken when work becomes claimable, once the write that
made it so is visible to other connections."""

from __future__ import annotations

import threading

from llamaherd.engine import Engine
from llamaherd.testing import OfflineProject
from llamaherd.types import TriggerEvent


class VisibilityProbe(threading.Event):
    """An engine's ``wakeup`` that records, at each ``set``, whether another thread (the
    dispatcher, on its own connection) would find the queued item then."""

    def __init__(self, store) -> None:
        super().__init__()
        self.store = store
        self.seen: list[bool] = []

    def set(self) -> None:
        found: list[bool] = []
        looker = threading.Thread(target=lambda: found.append(self.store.has_queued()))
        looker.start()
        looker.join()
        self.seen.append(found[0])
        super().set()


def test_an_item_queued_inside_a_write_wakes_the_dispatcher_after_its_commit(tmp_path) -> None:
    """A webhook's fan-out emits inside one write transaction: a wake-up before its commit
    let the dispatcher look, find nothing and sleep until its next pass (the ~1 s stall of
    webhook-started runs)."""
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("taker")
    engine = Engine(project.load())
    try:
        engine.wakeup = probe = VisibilityProbe(engine.store)
        event = TriggerEvent(agent="taker", kind="webhook", payload={"n": 1})
        engine.store.write(engine.emit, event)
        assert probe.seen == [True]
        engine.emit(TriggerEvent(agent="taker", kind="manual", payload={"n": 2}))
        assert probe.seen == [True, True]
    finally:
        engine.close()

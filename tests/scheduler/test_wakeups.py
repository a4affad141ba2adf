"""Wake-ups, not ticks: the dispatcher is woken when work becomes claimable, once the write that
made it so is visible to other connections."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llamaherd.engine import Engine
from llamaherd.testing import OfflineProject, settled, thread_switches
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


def _wake_ups(pid: int, seconds: float, step: float = 0.1) -> int:
    """How many times ``pid`` woke up on its own within ``seconds``, judged by ``step``-long
    slices in which any of its threads ran: a run of such slices is one wake-up (a housekeeping
    pass that wakes several threads), and one more for each further second it lasts (a thread
    ticking every few milliseconds is never quiet for a whole slice)."""
    wakes, run, last = 0, 0, thread_switches(pid)
    per_second = round(1 / step)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(step)
        now = thread_switches(pid)
        run = run + 1 if now != last else 0
        if run % per_second == 1:
            wakes += 1
        last = now
    return wakes


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_an_idle_scheduler_wakes_at_most_once_per_10_seconds(tmp_path, scheduler) -> None:
    """Every thread of an idle scheduler (dispatcher, cron, live reload, HTTP servers, store
    writer, plugins) sleeps until something happens: a loop that wakes on a timer shorter than
    10 s (a 1 s housekeeping tick, a 50 ms stop check) fails this."""
    project = OfflineProject(
        tmp_path / "proj", '[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n'
    )
    project.add_scripted_agent("yearly", 'schedule = "0 0 1 1 *"\n')
    project.add_scripted_agent("hooked", '[[webhooks]]\nsource = "hooks"\nevents = ["push"]\n')
    pid = scheduler(project).proc.pid
    settled(pid)  # start-up over; one that never settles is measured as it is
    wakes = _wake_ups(pid, 10.0)
    assert wakes <= 1, f"the idle scheduler woke {wakes} times in 10 s"

"""The scheduler's timers: the earliest armed moment, re-armed, disarmed and expired by name."""

from __future__ import annotations

from llamaherd.timers import Timers


def test_the_earliest_armed_moment_and_rearming_by_name() -> None:
    timers = Timers()
    assert timers.next() is None
    timers.arm("flow", 30.0)
    timers.arm("waits", 20.0)
    assert timers.next() == 20.0
    timers.arm("waits", 40.0)  # re-armed later: its earlier entry no longer counts
    assert timers.next() == 30.0
    timers.arm("flow", None)  # disarmed
    assert timers.next() == 40.0


def test_expire_disarms_what_passed_and_keeps_the_rest() -> None:
    timers = Timers()
    timers.arm("hold:a", 10.0)
    timers.arm("hold:b", 15.0)
    timers.arm("prune", 50.0)
    timers.expire(15.0)
    assert timers.next() == 50.0
    timers.expire(49.0)
    assert timers.next() == 50.0


def test_many_rearms_keep_the_heap_small() -> None:
    timers = Timers()
    for moment in range(10_000):
        timers.arm("flow", float(moment))
    assert timers.next() == 9_999.0
    assert len(timers._heap) < 200

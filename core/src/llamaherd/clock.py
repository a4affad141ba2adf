"""Time and identity of this process: the clock every timestamp comes from, how a thread sleeps
until a moment of it, and the host id under which a scheduler heartbeats and owns runs.

Its own module because the store, the prompts, the engine and the plugins all need it, and none
of them should import the others for it.

Tests may replace the clock with a file (``AL_FAKE_CLOCK_FILE``) holding either ``T`` (the
clock stands at epoch second ``T``) or ``T W`` (it read ``T`` at wall time ``W`` and runs on
from there in real time: moved, not stopped). A fake clock moves time and nothing else: every
sleep (``sleep``) still ends at the moment it was for, and a sleeper wakes for no other reason
than a real one would, but that the fake clock was set, as a real clock may be stepped.
"""

from __future__ import annotations

import os
import socket
import threading
import time

# How often a sleep on a fake clock looks whether the file was rewritten (a set clock). Only
# there: on the real clock a sleep is one wait.
FAKE_CLOCK_LOOK = 0.02

_fake: list[tuple[str, float]] = []  # the fake clock file's last text, and what it read


def _fake_reading(path: str) -> tuple[str, float] | None:
    """The fake clock file's text and the time it says now; the last good reading when the
    file was caught half-written (a fake clock never falls back to wall time)."""
    try:
        with open(path) as fh:
            text = fh.read().strip()
        at, _, since = text.partition(" ")
        now = float(at) + (time.time() - float(since) if since else 0.0)
    except (OSError, ValueError):
        return _fake[0] if _fake else None
    _fake[:] = [(text, now)]
    return text, now


def clock() -> float:
    """Wall time, or the time the file named by ``AL_FAKE_CLOCK_FILE`` says (tests)."""
    fake = os.environ.get("AL_FAKE_CLOCK_FILE")
    reading = _fake_reading(fake) if fake else None
    return time.time() if reading is None else reading[1]


def sleep(wake: threading.Event, until: float | None = None, longest: float | None = None) -> bool:
    """Sleep until ``wake`` is set, ``clock()`` reads ``until`` or later, or ``longest`` real
    seconds have passed (None: no such bound); whether ``wake`` ended it.

    On a fake clock the sleep also ends when the clock is set (its file rewritten), so the
    caller looks at the time again, as a program using timerfd's TFD_TIMER_CANCEL_ON_SET does
    when the real clock is stepped."""
    fake = os.environ.get("AL_FAKE_CLOCK_FILE")
    deadline = None if longest is None else time.monotonic() + max(0.0, longest)
    if not fake:
        waits = [deadline - time.monotonic()] if deadline is not None else []
        if until is not None:
            waits.append(until - time.time())
        return wake.wait(max(0.0, min(waits)) if waits else None)
    start = _fake_reading(fake)
    while True:
        reading = _fake_reading(fake)
        if until is not None and reading is not None and reading[1] >= until:
            return False
        if reading is not None and start is not None and reading[0] != start[0]:
            return False  # the clock was set
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        if wake.wait(FAKE_CLOCK_LOOK if left is None else min(FAKE_CLOCK_LOOK, left)):
            return True


def machine_name() -> str:
    """This machine's name in host ids: $AL_HOST_NAME, else the hostname.

    Set AL_HOST_NAME when schedulers that do not share a process table share a hostname
    (containers with the host's UTS namespace): a host on the same machine is judged by its pid."""
    return os.environ.get("AL_HOST_NAME") or socket.gethostname()


def host_id() -> str:
    """``<machine>:<pid>``: this scheduler process among all that share a database."""
    return f"{machine_name()}:{os.getpid()}"

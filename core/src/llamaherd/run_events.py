"""Run events for ``run_event`` plugins, delivered off the run's thread.

A run records each event in the store (``RunContext.log``), then ``publish`` hands it to a
bounded queue that one daemon thread drains, calling every ``run_event`` implementation in
turn. So a slow or failing plugin never slows or breaks a run: a slow one delays only later
deliveries, and once ``QUEUE_SIZE`` events wait, new ones are dropped (counted, one warning a
minute); one that raises is one warning a minute per plugin. Nothing is queued while no plugin
implements the hook. At exit the thread gets ``DRAIN_AT_EXIT`` seconds to deliver what still
waits (a foreground ``al run`` ends right after its run).
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
from typing import Any

from llamaherd.clock import clock
from llamaherd.plugins import get_manager

log = logging.getLogger("llamaherd.run_events")

QUEUE_SIZE = 10_000
DRAIN_AT_EXIT = 5.0
WARN_EVERY = 60.0  # seconds between two warnings about the same problem


class Fanout:
    """The queue and the thread that deliver run events to the plugins."""

    def __init__(self, size: int = QUEUE_SIZE):
        self._queue: queue.Queue[tuple[Any, str, dict[str, Any], float]] = queue.Queue(size)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._done = threading.Condition()
        self._published = 0  # queued so far
        self._delivered = 0  # taken off the queue and handed to every plugin
        self.dropped = 0
        self._warned: dict[str, float] = {}

    def publish(self, run: Any, kind: str, data: dict[str, Any]) -> None:
        """Queue one event for the plugins (never blocks; dropped when the queue is full)."""
        if not get_manager().hook.run_event.get_hookimpls():
            return
        self._start()
        with self._done:
            try:
                self._queue.put_nowait((run, kind, data, clock()))
            except queue.Full:
                self.dropped += 1
                self._warn(
                    "queue",
                    f"run_event: {self.dropped} event(s) dropped so far: a plugin's run_event "
                    f"is too slow ({self._queue.maxsize} events were waiting)",
                )
                return
            self._published += 1

    def flush(self, timeout: float) -> bool:
        """Wait until every event queued so far was delivered; False when ``timeout`` passed."""
        with self._done:
            target = self._published
            return self._done.wait_for(lambda: self._delivered >= target, timeout)

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="al-run-events", daemon=True)
                thread.start()
                atexit.register(self.flush, DRAIN_AT_EXIT)
                self._thread = thread

    def _loop(self) -> None:
        while True:
            run, kind, data, at = self._queue.get()
            try:
                self._deliver(run, kind, data, at)
            finally:
                with self._done:
                    self._delivered += 1
                    self._done.notify_all()

    def _deliver(self, run: Any, kind: str, data: dict[str, Any], at: float) -> None:
        arguments = {"run": run, "type": kind, "data": data, "at": at}
        for impl in reversed(get_manager().hook.run_event.get_hookimpls()):
            try:
                impl.function(**{name: arguments[name] for name in impl.argnames})
            except Exception as exc:  # a broken plugin must not stop the others' deliveries
                self._warn(
                    impl.plugin_name,
                    f"plugin {impl.plugin_name!r} failed in run_event: {type(exc).__name__}: {exc}",
                )

    def _warn(self, key: str, message: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(key, -WARN_EVERY) >= WARN_EVERY:
            self._warned[key] = now
            log.warning("%s", message)


FANOUT = Fanout()


def publish(run: Any, kind: str, data: dict[str, Any]) -> None:
    """Hand a recorded run event to the ``run_event`` plugins (see the module docstring);
    not an event of a fenced engine's run (a test run, ``Engine.fenced``)."""
    if not getattr(getattr(run, "engine", None), "fenced", False):
        FANOUT.publish(run, kind, data)


def flush(timeout: float = DRAIN_AT_EXIT) -> bool:
    """Wait until the events published so far reached the plugins (tests, shutdown)."""
    return FANOUT.flush(timeout)

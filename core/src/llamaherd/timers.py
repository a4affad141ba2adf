"""When a scheduler must next look at its work: the earliest of its named deadlines.

Each deadline stands for something that becomes possible at a moment of the engine's clock: a
debounce window closing, a throttle letting a key start again, a batch timing out, a budget
period rolling over, a deferred agent's runtime having room again, a wait expiring. Whoever
learns such a moment arms its name with it (re-arming replaces, None disarms); the main loop
sleeps until the earliest (``llamaherd.clock.sleep``), drops what passed, and the pass it runs
arms again whatever still stands. Nothing is polled: a scheduler with nothing due sleeps.
"""

from __future__ import annotations

import heapq
import threading


class Timers:
    """Named due times (epoch seconds of the engine's clock), earliest first.

    A heap with lazy deletion: re-arming a name pushes a new entry and leaves the old one to be
    skipped when it reaches the top (its time is no longer the name's)."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def arm(self, name: str, at: float | None) -> None:
        """``name`` is due at ``at`` (None: no longer due at all)."""
        with self._lock:
            if at is None:
                self._due.pop(name, None)
                return
            if self._due.get(name) == at:
                return
            self._due[name] = at
            heapq.heappush(self._heap, (at, name))
            if len(self._heap) > 4 * len(self._due) + 64:  # mostly stale entries: rebuild
                self._heap = [(due, key) for key, due in self._due.items()]
                heapq.heapify(self._heap)

    def next(self) -> float | None:
        """The earliest due time armed, or None."""
        with self._lock:
            heap = self._heap
            while heap and self._due.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)
            return heap[0][0] if heap else None

    def expire(self, now: float) -> None:
        """Disarm the names due at or before ``now``: the pass about to run arms again what
        still stands."""
        with self._lock:
            heap = self._heap
            while heap and heap[0][0] <= now:
                at, name = heapq.heappop(heap)
                if self._due.get(name) == at:
                    del self._due[name]

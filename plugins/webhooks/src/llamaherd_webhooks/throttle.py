"""How many rejected deliveries a sender may leave a trace of: a token bucket per (source,
client address). Anyone can post an unsigned request, so beyond the rate a rejected one is
answered 429 and neither stored nor logged one by one. Verified deliveries never pass through
here: a flood of forgeries cannot delay a genuine sender (behind a proxy they share an address).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

REJECTS_PER_MINUTE = 60  # rejected deliveries recorded per source and client address
MAX_CLIENTS = 10_000  # buckets kept; beyond it full (idle) ones are forgotten


class RejectThrottle:
    """``allow(source, client)``: whether one more rejected delivery may be recorded."""

    def __init__(
        self, per_minute: int = REJECTS_PER_MINUTE, clock: Callable[[], float] = time.monotonic
    ):
        self.burst = float(per_minute)
        self.rate = per_minute / 60.0  # tokens per second
        self.clock = clock
        self.buckets: dict[tuple[str, str], tuple[float, float]] = {}  # key -> (tokens, at)
        self.suppressed: dict[str, int] = {}  # source -> rejections not recorded since last log
        self.lock = threading.Lock()

    def allow(self, source: str, client: str) -> bool:
        now = self.clock()
        with self.lock:
            tokens = self._tokens((source, client), now)
            if tokens >= 1:
                self.buckets[(source, client)] = (tokens - 1, now)
                return True
            self.buckets[(source, client)] = (tokens, now)
            self.suppressed[source] = self.suppressed.get(source, 0) + 1
            return False

    def take_suppressed(self, source: str) -> int:
        """Rejections of ``source`` not recorded since the last call (to log them as one)."""
        with self.lock:
            return self.suppressed.pop(source, 0)

    def _tokens(self, key: tuple[str, str], now: float) -> float:
        if key not in self.buckets and len(self.buckets) >= MAX_CLIENTS:
            self._forget_idle(now)
        tokens, at = self.buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - at) * self.rate)

    def _forget_idle(self, now: float) -> None:
        self.buckets = {
            key: (tokens, at)
            for key, (tokens, at) in self.buckets.items()
            if tokens + (now - at) * self.rate < self.burst
        }
        if len(self.buckets) >= MAX_CLIENTS:  # that many busy senders: start them all afresh
            self.buckets.clear()

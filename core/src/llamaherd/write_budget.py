"""What one run may write to the store: a number of records and of bytes.

A run writes run events (its tool calls with their output, model text, hook output, status,
locks...), status messages and the tool output kept in its transcript. Each piece is capped on
its own (a status 2,000 characters, a tool's output 30,000), but not how many there are: 3,000
statuses of 2,000 characters from one run grew ``.al`` by 20 MB in 10 s, about 1.7 GB over a
default timeout. So one run may write at most ``MAX_RUN_RECORDS`` events and status messages,
and ``MAX_RUN_BYTES`` bytes of them and of tool output kept. Past either, for the rest of the
run: events are dropped, a status replaces the current one without being kept as history, a
return value is set without its event, tool output is kept in the transcript cut to
``OUTPUT_OVER_BUDGET`` characters, and one ``write_budget`` event (and a warning in the
scheduler's log) says so.

The budget is the run's, whatever process writes for it: a process that first writes for a
run (its scheduler after a restart, another host) counts what the store already holds of it.
"""

from __future__ import annotations

import threading

MAX_RUN_RECORDS = 10_000  # run events and status messages of one run
MAX_RUN_BYTES = 16 * 1024 * 1024  # their bytes (as stored) and the tool output kept
OUTPUT_OVER_BUDGET = 2_000  # characters of a tool's output kept once the budget is spent


class WriteBudget:
    """One run's budget: ``take`` before each write; thread-safe (the run's session and its
    gateway calls write at once)."""

    def __init__(self, records: int = 0, size: int = 0):
        self.records = records
        self.bytes = size
        self.spent = False  # once a write did not fit, nothing more does
        self.dropped = 0
        self._noticed = False
        self._lock = threading.Lock()

    def take(self, size: int, records: int = 1) -> bool:
        """Count a write of ``records`` records and ``size`` bytes; False when it does not fit
        (then it must not be written)."""
        with self._lock:
            fits = self.records + records <= MAX_RUN_RECORDS and self.bytes + size <= MAX_RUN_BYTES
            if self.spent or not fits:
                self.spent = True
                self.dropped += 1
                return False
            self.records += records
            self.bytes += size
            return True

    def notice_due(self) -> bool:
        """True once, after the first refused write: the caller records the notice."""
        with self._lock:
            due = self.spent and not self._noticed
            self._noticed = self._noticed or due
            return due

    def notice(self) -> str:
        return (
            f"this run has written {self.records:,} records and {self.bytes:,} bytes, as much "
            f"as one run may ({MAX_RUN_RECORDS:,} records, {MAX_RUN_BYTES:,} bytes): its "
            "further events are dropped, its status is updated without history and its tool "
            f"output is kept cut to {OUTPUT_OVER_BUDGET:,} characters"
        )

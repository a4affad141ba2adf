"""What one run may write to the store: a number of records and of bytes.

Everything a run causes to be stored is charged here, through one method
(``ActiveRun.within_budget``), before it is written: run events (tool calls, model text, hook
output, status, locks...), status messages, return values, lock rows, agent calls (the call
and its callee's queued trigger, each holding the context), its agent's state changes and the
transcript (messages as they are added: the prompts, model text, tool-call arguments, tool
output; and its meta entry as it grows, setenv names included). Each piece is capped on its own
(a status 2,000 characters, a tool's output 30,000), but not how many there are: 3,000 statuses
of 2,000 characters from one run grew ``.al`` by 20 MB in 10 s, distinct 2,000-character lock
URIs by 275 MB in 30 s, a model answering 400 KB a turn by 213 MB in one run. So one run may
write at most ``MAX_RUN_RECORDS`` records and ``MAX_RUN_BYTES`` bytes.

Past either, for the rest of the run, what is history is no longer kept and what is new is
refused: events are dropped; a status replaces the current one without being kept as history;
a return value is set without its event; an agent state change is applied without its agent
event; a new lock is refused (a lock the run holds is still extended); a call is refused; each
message added to the transcript is kept cut to ``OUTPUT_OVER_BUDGET`` characters with a marker
(model text, each tool call's arguments, tool output), in the store and in what the model is
sent again, so a run that goes on neither fills the disk nor the scheduler's memory. Those cut
pieces may take ``CUT_RESERVE`` bytes more; a run that needs more than that is stopped (state
``error``, exit ``BUDGET_EXIT``, reason ``write budget: ...``). One ``write_budget`` event (and
a warning in the scheduler's log) says the budget is spent.

The budget is the run's, whatever process writes for it: a process that first writes for a
run (its scheduler after a restart, another host) counts what the store already holds of it
(``Store.run_writes``).
"""

from __future__ import annotations

import threading

MAX_RUN_RECORDS = 10_000  # rows one run adds: events, status messages, lock rows, calls
MAX_RUN_BYTES = 8 * 1024 * 1024  # bytes of everything it writes (as stored)
# The transcript is rewritten at every checkpoint (after each turn): the database holds the
# old copy while it writes the new one, so its bytes count twice.
TRANSCRIPT_COPIES = 2
OUTPUT_OVER_BUDGET = 2_000  # characters of a message's text (or arguments) kept past it
CUT_RESERVE = 1024 * 1024  # bytes of cut messages kept past it; then the run stops
CALL_BYTES = 512  # what a call row and its callee's queued trigger take besides the context
SPENT = "this run has written as much as one run may (see its write_budget event)"


class WriteBudget:
    """One run's budget: ``take`` before each write; thread-safe (the run's session and its
    gateway calls write at once)."""

    def __init__(self, records: int = 0, size: int = 0):
        self.records = records
        self.bytes = size
        self.spent = False  # once a write did not fit, nothing more does
        self.dropped = 0
        self.cut = 0  # bytes of cut messages kept past the budget (``take_cut``)
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

    def take_cut(self, size: int) -> bool:
        """Count ``size`` bytes of a message kept cut past the budget; False when they pass
        ``CUT_RESERVE`` (the run must stop)."""
        with self._lock:
            self.cut += size
            return self.cut <= CUT_RESERVE

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
            "further events are dropped, its status and its agent's state are updated without "
            "history, new locks and calls are refused, and what its transcript keeps of model "
            f"text, tool-call arguments and tool output is cut to {OUTPUT_OVER_BUDGET:,} "
            "characters each"
        )

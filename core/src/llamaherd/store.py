"""The durable store: work queue, runs and their events, locks, calls, waits, agent states.

One peewee database (SQLite in WAL mode at ``.al/work-queue.db`` by default; any peewee URL,
PostgreSQL included, through ``database``). Every public method is one transaction. Nothing here
is SQLite-only SQL: claims use ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and ``BEGIN IMMEDIATE``
on SQLite.

STATUS: interface stub. Signatures and docstrings are the contract the scheduler, the session and
the triggers code against; the implementation fills the bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RUN_STATES = ("queued", "running", "waiting", "done", "error", "timeout", "killed")
FINAL_STATES = ("done", "error", "timeout", "killed")
# The one place allowed transitions live.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "queued": ("running", "killed", "error"),
    "running": ("waiting", "done", "error", "timeout", "killed"),
    "waiting": ("running", "error", "timeout", "killed"),
    "done": (),
    "error": (),
    "timeout": (),
    "killed": (),
}
EXIT_CODES = {"done": 0, "error": 1, "timeout": 124, "killed": 137}


class StoreError(Exception):
    """The database cannot be used (corrupt, read-only, disk full, locked by another writer)."""


class InvalidTransition(StoreError):
    pass


@dataclass
class WorkItemRow:
    id: int
    agent: str
    kind: str  # scheduled | manual | webhook | agent | resume
    payload: dict[str, Any]
    prompt: str
    source: str | None
    run_id: str | None  # for kind == "resume": the waiting run to continue
    call_id: int | None
    recovery: dict[str, Any] | None  # set when requeued after a crash: the interrupted run's times
    rerun_count: int
    created_at: float


@dataclass
class RunRow:
    id: str
    agent: str
    state: str
    trigger_kind: str
    item_id: int | None
    host: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str | None
    status: str | None
    return_value: Any
    call_depth: int
    caller_run: str | None
    call_id: int | None
    rerun_count: int
    rerun_requested: bool
    sandbox: dict[str, Any] | None  # runtime handle for attach after restart
    transcript: list[dict[str, Any]] | None
    wait_filter: dict[str, Any] | None
    wait_deadline: float | None
    deadline: float | None
    input_tokens: int
    output_tokens: int
    token_hash: str | None  # sha256 of the run's gateway token
    trigger: dict[str, Any]  # the work item's kind/payload/prompt/source/recovery, copied at claim


class Store:
    """Open with ``Store.open(url, root)``; the schema is created or migrated on open."""

    @classmethod
    def open(cls, url: str, root: str | None = None) -> Store:
        """Connect (relative sqlite paths are under ``root``), create/migrate the schema."""
        raise NotImplementedError

    def close(self) -> None: ...

    # ---------------------------------------------------------------- queue
    def enqueue(
        self,
        agent: str,
        kind: str,
        payload: dict[str, Any],
        prompt: str = "",
        *,
        limit: int = 100,
        source: str | None = None,
        dedupe_key: str | None = None,
        call_id: int | None = None,
        run_id: str | None = None,
        recovery: dict[str, Any] | None = None,
        rerun_count: int = 0,
        coalesce: bool = False,
    ) -> int | None:
        """Commit a work item; return its id, or None when ``dedupe_key`` was seen before or
        ``coalesce`` found an equivalent pending item (same agent and kind, still queued).
        When the agent's queue already holds ``limit`` items the oldest are dropped, each with a
        ``dropped`` agent event and a log line."""
        raise NotImplementedError

    def claim(
        self,
        scales: dict[str, int],
        global_scale: int | None,
        host: str,
        paused: set[str] | None = None,
    ) -> tuple[WorkItemRow, RunRow] | None:
        """Atomically take the oldest claimable item (FIFO per agent; agents fairly) whose agent
        has fewer than ``scales[agent]`` runs in state ``running`` and with fewer than
        ``global_scale`` running overall. A normal item creates a Run in ``running``; a
        ``resume`` item moves its waiting run back to ``running``. Returns None when nothing
        can be claimed."""
        raise NotImplementedError

    def queue_depth(self, agent: str | None = None) -> dict[str, int]: ...

    def clear_queue(self, agent: str, kinds: tuple[str, ...] | None = None) -> int:
        """Delete queued items of ``agent`` (optionally only these kinds); return the count."""
        raise NotImplementedError

    # ---------------------------------------------------------------- runs
    def create_run(self, agent: str, trigger_kind: str, **fields: Any) -> RunRow:
        """A run in ``running`` not from the queue (foreground ``al run``)."""
        raise NotImplementedError

    def get_run(self, run_id: str) -> RunRow | None: ...

    def find_run(self, prefix: str) -> RunRow | None:
        """A run by full id or unique prefix."""
        raise NotImplementedError

    def runs(
        self, agent: str | None = None, states: tuple[str, ...] | None = None, limit: int = 50
    ) -> list[RunRow]: ...

    def transition(
        self, run_id: str, state: str, reason: str | None = None, exit_code: int | None = None
    ) -> RunRow:
        """Move a run to ``state`` if TRANSITIONS allows it (else InvalidTransition), record a
        ``state`` event with time and reason. Entering a final state releases its locks, marks
        its work item done and settles its call record (done with return value, or error)."""
        raise NotImplementedError

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set plain columns: sandbox, deadline, host, status, rerun_requested, tokens..."""
        raise NotImplementedError

    def checkpoint(self, run_id: str, transcript: list[dict[str, Any]]) -> None: ...

    def set_status(self, run_id: str, text: str) -> None:
        """Record a status message (kept as history) and make it the run's current status."""
        raise NotImplementedError

    def set_return(self, run_id: str, value: Any) -> None: ...

    def add_event(self, run_id: str, type: str, data: dict[str, Any] | None = None) -> None:
        """Append a run event (also used for structured log lines: model_call, tool_call...)."""
        raise NotImplementedError

    def events(self, run_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        """Run events with id > after_id, oldest first: {id, at, type, data}."""
        raise NotImplementedError

    def status_messages(self, run_id: str) -> list[dict[str, Any]]: ...

    def active_count(self, agent: str | None = None) -> int: ...

    # ---------------------------------------------------------------- waits
    def set_waiting(self, run_id: str, wait_filter: dict[str, Any], deadline: float) -> None:
        """Transition running -> waiting with the filter and deadline stored."""
        raise NotImplementedError

    def waiting_runs(self) -> list[RunRow]: ...

    def resume_waiting(self, run_id: str, payload: dict[str, Any]) -> bool:
        """Enqueue a ``resume`` item for a waiting run once (False if already resumed)."""
        raise NotImplementedError

    def expired_waits(self, now: float) -> list[RunRow]: ...

    # ---------------------------------------------------------------- calls
    def create_call(self, caller_run: str, target: str, context: str, depth: int) -> int: ...

    def get_call(self, call_id: int) -> dict[str, Any] | None:
        """{id, caller_run, target, state: pending|done|error, return_value, error, run_id}."""
        raise NotImplementedError

    # ---------------------------------------------------------------- locks
    def acquire_lock(self, run_id: str, uri: str, ttl: float) -> dict[str, Any]:
        """{"ok": True} or {"ok": False, "holder": run_id, "expires_at": t} or, when the holder
        is itself waiting on a lock this run holds, {"ok": False, "deadlock": [a, b], ...}.
        Expired locks are reclaimed first. Re-acquiring one's own lock extends it."""
        raise NotImplementedError

    def release_lock(self, run_id: str, uri: str) -> bool: ...

    def heartbeat_lock(self, run_id: str, uri: str | None, ttl: float) -> int:
        """Extend one (or, with uri None, all) of the run's locks; return how many."""
        raise NotImplementedError

    def release_all_locks(self, run_id: str) -> int: ...

    def locks(self) -> list[dict[str, Any]]: ...

    # ---------------------------------------------------------------- agent states
    def agent_state(self, agent: str) -> str:
        """Stored state: idle (default), hibernate, suspended, error, off."""
        raise NotImplementedError

    def set_agent_state(self, agent: str, state: str, cause: str) -> None: ...

    def add_agent_event(self, agent: str, type: str, data: dict[str, Any] | None = None) -> None: ...

    def agent_events(self, agent: str, limit: int = 50) -> list[dict[str, Any]]: ...

    def set_paused(self, agent: str | None, paused: bool) -> None:
        """Pause/resume one agent, or (agent None) the whole scheduler."""
        raise NotImplementedError

    def paused(self) -> tuple[bool, set[str]]:
        """(scheduler paused, paused agents)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- cron
    def claim_tick(self, agent: str, tick: float) -> bool:
        """True exactly once per (agent, tick), across processes and hosts."""
        raise NotImplementedError

    def last_tick(self, agent: str) -> float | None: ...

    # ---------------------------------------------------------------- webhooks
    def record_delivery(
        self,
        source: str,
        delivery_id: str | None,
        headers: dict[str, str],
        body: bytes,
        status: int,
        result: str,
        matched: list[str],
    ) -> bool:
        """Keep a receipt; False when (source, delivery_id) was already recorded."""
        raise NotImplementedError

    def delivery_seen(self, source: str, delivery_id: str) -> bool: ...

    def deliveries(self, limit: int = 50, dead_letters: bool = False) -> list[dict[str, Any]]: ...

    # ---------------------------------------------------------------- hosts and upkeep
    def heartbeat_host(self, host: str, info: dict[str, Any]) -> None: ...

    def stale_hosts(self, older_than: float) -> list[str]: ...

    def prune(self, days: float) -> int:
        """Delete finished runs, events, deliveries older than ``days``; return rows removed."""
        raise NotImplementedError

    def stats(self, agent: str | None = None, since: float | None = None) -> dict[str, Any]: ...

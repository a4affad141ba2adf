"""The durable store: work queue, runs and their events, locks, calls, waits, agent states, and
the tables plugins register.

One peewee database (SQLite in WAL mode at ``.al/work-queue.db`` by default; any peewee URL,
PostgreSQL included, through ``database``). Every public method is one transaction, and
``atomic()`` joins several into one. Nothing here is SQLite-only SQL: claims use
``FOR UPDATE SKIP LOCKED`` on PostgreSQL and ``BEGIN IMMEDIATE`` on SQLite.

Concurrency. peewee keeps one connection per thread, so a Store is shared by all the threads of a
process. On SQLite every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time across
processes, waiting up to the busy timeout, default 10 s, ``?timeout=`` in the URL); WAL with
``synchronous=NORMAL`` keeps every committed item across a killed process. On PostgreSQL claims
of one agent are serialised by a transaction-level advisory lock, so ``scale`` holds across any
number of schedulers, while work items are taken with ``FOR UPDATE SKIP LOCKED``.

Errors. A database that cannot be used (corrupt, read-only, disk full, locked past the busy
timeout, unreachable) raises ``StoreError`` with one line naming the database and what to do;
the transaction is rolled back, so no item is ever half written.

Layout, one module per concern:

- ``connection``: connecting, write transactions (``atomic``), errors, prepared statements;
- ``schema``: core's models, plugins' table sets (``tables(name)``), creating and migrating
  both on open; ``migrations``: core's schema versions;
- ``queue``: enqueue, claim, resume items; ``runs``: runs, events, status messages, waits, stats;
- ``overview``: what an operator's overview reads (run search, activity, spend, queued items);
- ``coordination``: calls, locks, trigger ticks, hosts; ``agents``: agent states, events, pauses;
- ``flow``: flow control at enqueue and claim (``llamaherd.flow``), the spend ledger budgets
  read.

Why ``Store`` is assembled from mixins rather than composed of one object per concern: the
concerns are facets of one connection, not separate services. They share its transaction (a
claim inserts a run and settles a call; a run's end releases locks, retires its item and settles
its call, all in one commit), its per-thread connection and one namespace of prepared statements,
and they call each other inside that transaction. Composed objects would need references to each
other, or a layer of forwarding methods on the facade, on the hot paths (enqueue, claim,
transition, add_event) that are kept to raw prepared SQL. As mixins of one ``Connection``, each
concern lives in its own module and every call stays a plain method call on the one object every
caller already uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import peewee as pw

from llamaherd.store.agents import AGENT_STATES, Agents
from llamaherd.store.agents import statements as _agent_statements
from llamaherd.store.connection import (
    BUSY_TIMEOUT,
    DEFAULT_URL,
    SQLITE_PRAGMAS,
    StoreError,
    connect,
    guarded,
    prepare,
)
from llamaherd.store.coordination import Coordination
from llamaherd.store.coordination import statements as _coordination_statements
from llamaherd.store.flow import FlowStore
from llamaherd.store.flow import statements as _flow_statements
from llamaherd.store.overview import Overview
from llamaherd.store.queue import ITEM_STATES, WorkItemRow
from llamaherd.store.queue import statements as _queue_statements
from llamaherd.store.runs import (
    EXIT_CODES,
    FINAL_STATES,
    RUN_STATES,
    TRANSITIONS,
    InvalidTransition,
    RunRow,
    run_codecs,
)
from llamaherd.store.runs import statements as _run_statements
from llamaherd.store.schema import JSONText, Schema, Tables, define_models

if TYPE_CHECKING:
    from llamaherd.types import TableSet

log = logging.getLogger(__name__)

__all__ = [
    "AGENT_STATES", "BUSY_TIMEOUT", "DEFAULT_URL", "EXIT_CODES", "FINAL_STATES", "ITEM_STATES",
    "RUN_STATES", "SQLITE_PRAGMAS", "TRANSITIONS", "InvalidTransition", "JSONText", "RunRow",
    "Store", "StoreError", "Tables", "WorkItemRow",
]  # fmt: skip

_STATEMENTS = (
    _run_statements, _queue_statements, _coordination_statements, _agent_statements,
    _flow_statements,
)  # fmt: skip


class Store(Overview, FlowStore, Coordination, Agents, Schema):
    """Open with ``Store.open(url, root)``; the schema is created or migrated on open."""

    def __init__(
        self, db: pw.Database, where: str, timeout: float, clock: Callable[[], float]
    ) -> None:
        super().__init__(db, where, timeout, clock)
        self._m = define_models(db)
        self._sql = prepare(db, _STATEMENTS)
        self._run_reads, self._run_json, self._run_writes = run_codecs(self._m.Run)
        self._table_sets = {}

    @classmethod
    def open(
        cls,
        url: str,
        root: str | None = None,
        *,
        clock: Callable[[], float] | None = None,
        tables: Iterable[TableSet] | None = None,
    ) -> Store:
        """Connect (relative sqlite paths are under ``root``), create/migrate the schema.

        ``clock`` (default ``llamaherd.clock.clock``, which honours AL_FAKE_CLOCK_FILE) stamps
        every time the store writes: lock expiry, events, runs. ``tables``: the plugins' table
        sets to create or migrate and offer through ``tables(name)``; default, those the loaded
        plugins register (``register_tables``)."""
        if clock is None:
            from llamaherd.clock import clock
        if tables is None:
            from llamaherd.plugins import registry

            tables = registry().table_sets.values()
        db, where, timeout = connect(url or DEFAULT_URL, root)
        store = cls(db, where, timeout, clock)
        store._migrate(tables)
        return store

    @guarded
    def prune(self, days: float) -> int:
        """Delete finished runs, their events, old agent events and trigger ticks, and (through
        each table set's ``prune``) plugins' rows older than ``days``; return rows removed. The
        latest tick of each trigger key is kept (it is where a schedule resumes)."""
        cutoff = self._clock() - days * 86400
        removed = self._prune_core(cutoff)
        for tables, prune in self._table_set_prunes():
            try:
                with self._write():  # each its own transaction: a broken plugin spoils no other
                    removed += prune(tables, cutoff)
            except Exception as exc:  # upkeep goes on whatever one plugin does
                log.warning("prune of tables %r failed: %s", tables.name, self._reason(exc))
        return removed

    def _prune_core(self, cutoff: float) -> int:
        m = self._m
        with self._write():
            old_runs = m.Run.select(m.Run.id).where(
                m.Run.state.in_(list(FINAL_STATES)) & (m.Run.finished_at < cutoff)
            )
            ticks = m.TriggerTick
            latest_ticks = ticks.select(pw.fn.MAX(ticks.id)).group_by(ticks.key)
            deletes = [
                m.RunEvent.delete().where(m.RunEvent.run_id.in_(old_runs)),
                m.StatusMessage.delete().where(m.StatusMessage.run_id.in_(old_runs)),
                m.LockWait.delete().where(m.LockWait.run_id.in_(old_runs)),
                m.Call.delete().where(m.Call.finished_at < cutoff),
                m.Run.delete().where(m.Run.id.in_(old_runs)),
                m.WorkItem.delete().where(
                    m.WorkItem.state.in_(["done", "dropped"]) & (m.WorkItem.created_at < cutoff)
                ),
                m.AgentEvent.delete().where(m.AgentEvent.at < cutoff),
                ticks.delete().where((ticks.tick < cutoff) & ticks.id.not_in(latest_ticks)),
                # A key's rate state long past its time counts nothing any more.
                m.FlowLimit.delete().where(m.FlowLimit.tat < cutoff),
                m.FlowMessage.delete().where(m.FlowMessage.created_at < cutoff),
            ]
            return sum(query.execute() for query in deletes)

    def _table_set_prunes(self) -> list[tuple[Tables, Callable[[Tables, float], int]]]:
        """(tables, prune) of each opened table set that declares a prune."""
        return [
            (tables, prune)
            for tables in self._table_sets.values()
            if isinstance(tables, Tables) and (prune := tables.prune) is not None
        ]

"""The durable store: work queue, runs and their events, locks, calls, waits, agent states.

One peewee database (SQLite in WAL mode at ``.al/work-queue.db`` by default; any peewee URL,
PostgreSQL included, through ``database``). Every public method is one transaction. Nothing here
is SQLite-only SQL: claims use ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and ``BEGIN IMMEDIATE``
on SQLite.

Concurrency. peewee keeps one connection per thread, so a Store is shared by all the threads of a
process. On SQLite every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time across
processes, waiting up to the busy timeout, default 10 s, ``?timeout=`` in the URL); WAL with
``synchronous=NORMAL`` keeps every committed item across a killed process. On PostgreSQL claims
of one agent are serialised by a transaction-level advisory lock, so ``scale`` holds across any
number of schedulers, while work items are taken with ``FOR UPDATE SKIP LOCKED``.

Errors. A database that cannot be used (corrupt, read-only, disk full, locked past the busy
timeout, unreachable) raises ``StoreError`` with one line naming the database and what to do;
the transaction is rolled back, so no item is ever half written.

Schema versions live in ``llamaherd.migrations``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import operator
import os
import secrets
import sqlite3
import statistics
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import peewee as pw

from llamaherd import migrations
from llamaherd.types import LlamaherdError

log = logging.getLogger(__name__)

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
AGENT_STATES = ("idle", "hibernate", "suspended", "error", "off")
# Work item states: queued -> claimed -> done, or queued -> dropped (queue full).
ITEM_STATES = ("queued", "claimed", "done", "dropped")

DEFAULT_URL = "sqlite:///.al/work-queue.db"
BUSY_TIMEOUT = 10.0
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",  # with WAL: durable against a killed process, fsync at checkpoints
    "cache_size": -16000,
    "temp_store": "memory",
}
# claim(): with up to this many agents having room, each queue head is found by an index seek.
_SEEK_AGENTS = 16
_PAUSED_ALL = "*"  # the paused-table row that pauses the whole scheduler
# PostgreSQL advisory lock classes (first key of pg_advisory_xact_lock(int, int)).
_PG_SCHEMA, _PG_CLAIM, _PG_QUEUE, _PG_GLOBAL = 7401, 7402, 7403, 7404
# Which queued items the claiming host (the one parameter) may take: a resume item is left to
# the live host that parked its run, where its sandbox is (a host that died has lost its row).
_RESUME_HERE = (
    "NOT (kind = 'resume' AND run_id IN (SELECT runs.id FROM runs JOIN hosts "
    "ON hosts.name = runs.host WHERE runs.state = 'waiting' AND runs.host <> ?))"
)


class StoreError(LlamaherdError):
    """The database cannot be used (corrupt, read-only, disk full, locked by another writer)."""


class InvalidTransition(StoreError):
    """A run state change that TRANSITIONS does not allow."""


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


_ITEM_COLUMNS = tuple(f.name for f in fields(WorkItemRow))
_RUN_COLUMNS = tuple(f.name for f in fields(RunRow))
_run_values = operator.attrgetter(*_RUN_COLUMNS)
_CALL_COLUMNS = ("id", "caller_run", "target", "context", "depth", "state", "return_value",
                 "error", "run_id", "created_at", "finished_at")  # fmt: skip
# Columns update_run may set; state goes through transition(), identity never changes.
_PLAIN_RUN_COLUMNS = frozenset(_RUN_COLUMNS) - {"id", "agent", "state", "created_at"}


# ---------------------------------------------------------------------------------- schema
class JSONText(pw.TextField):
    """JSON in a TEXT column: the same text on every backend."""

    def db_value(self, value: Any) -> str | None:
        return None if value is None else _dumps(value)

    def python_value(self, value: str | None) -> Any:
        return None if value is None else json.loads(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def _define_models(db: pw.Database) -> SimpleNamespace:
    """The tables, bound to ``db`` (per Store, so stores on different databases coexist)."""

    class Base(pw.Model):
        class Meta:
            database = db
            legacy_table_names = False

    class WorkItem(Base):
        agent = pw.TextField()
        kind = pw.TextField()
        payload = JSONText()
        prompt = pw.TextField(default="")
        source = pw.TextField(null=True)
        run_id = pw.TextField(null=True)
        call_id = pw.IntegerField(null=True)
        recovery = JSONText(null=True)
        rerun_count = pw.IntegerField(default=0)
        created_at = pw.DoubleField()
        dedupe_key = pw.TextField(null=True)
        state = pw.TextField(default="queued")

        class Meta:
            table_name = "work_items"

    # The queue proper: only queued items, per agent in FIFO order.
    WorkItem.add_index(
        WorkItem.index(WorkItem.agent, WorkItem.id, where=(WorkItem.state == "queued"))
    )
    # Partial, so the common item (no key, not a resume) costs no index write at all.
    WorkItem.add_index(
        WorkItem.index(WorkItem.dedupe_key, unique=True, where=WorkItem.dedupe_key.is_null(False))
    )
    WorkItem.add_index(WorkItem.index(WorkItem.run_id, where=WorkItem.run_id.is_null(False)))

    class Run(Base):
        id = pw.TextField(primary_key=True)
        agent = pw.TextField()
        state = pw.TextField()
        trigger_kind = pw.TextField()
        item_id = pw.IntegerField(null=True)
        host = pw.TextField(null=True)
        created_at = pw.DoubleField()
        started_at = pw.DoubleField(null=True)
        finished_at = pw.DoubleField(null=True)
        exit_code = pw.IntegerField(null=True)
        reason = pw.TextField(null=True)
        status = pw.TextField(null=True)
        return_value = JSONText(null=True)
        call_depth = pw.IntegerField(default=0)
        caller_run = pw.TextField(null=True)
        call_id = pw.IntegerField(null=True)
        rerun_count = pw.IntegerField(default=0)
        rerun_requested = pw.BooleanField(default=False)
        sandbox = JSONText(null=True)
        transcript = JSONText(null=True)
        wait_filter = JSONText(null=True)
        wait_deadline = pw.DoubleField(null=True)
        deadline = pw.DoubleField(null=True)
        input_tokens = pw.IntegerField(default=0)
        output_tokens = pw.IntegerField(default=0)
        token_hash = pw.TextField(null=True)
        trigger = JSONText()

        class Meta:
            table_name = "runs"
            indexes = ((("state", "agent"), False), (("agent", "created_at"), False))

    class RunEvent(Base):
        id = pw.BigAutoField()
        run_id = pw.TextField()
        at = pw.DoubleField()
        type = pw.TextField()
        data = JSONText(null=True)

        class Meta:
            table_name = "run_events"
            indexes = ((("run_id", "id"), False),)

    class StatusMessage(Base):
        run_id = pw.TextField(index=True)
        at = pw.DoubleField()
        text = pw.TextField()

        class Meta:
            table_name = "status_messages"

    class Call(Base):
        caller_run = pw.TextField(index=True)
        target = pw.TextField()
        context = pw.TextField(default="")
        depth = pw.IntegerField(default=0)
        state = pw.TextField(default="pending")
        return_value = JSONText(null=True)
        error = pw.TextField(null=True)
        run_id = pw.TextField(null=True)
        created_at = pw.DoubleField()
        finished_at = pw.DoubleField(null=True)

        class Meta:
            table_name = "calls"

    class Lock(Base):
        uri = pw.TextField(primary_key=True)
        run_id = pw.TextField(index=True)
        acquired_at = pw.DoubleField()
        expires_at = pw.DoubleField(index=True)

        class Meta:
            table_name = "locks"

    class LockWait(Base):
        """The lock a run last failed to take: the edges of the wait-for graph."""

        run_id = pw.TextField(primary_key=True)
        uri = pw.TextField()
        since = pw.DoubleField()

        class Meta:
            table_name = "lock_waits"

    class AgentState(Base):
        agent = pw.TextField(primary_key=True)
        state = pw.TextField()
        cause = pw.TextField(null=True)
        updated_at = pw.DoubleField()

        class Meta:
            table_name = "agent_states"

    class AgentEvent(Base):
        id = pw.BigAutoField()
        agent = pw.TextField()
        at = pw.DoubleField(index=True)
        type = pw.TextField()
        data = JSONText(null=True)

        class Meta:
            table_name = "agent_events"
            indexes = ((("agent", "id"), False),)

    class Paused(Base):
        name = pw.TextField(primary_key=True)  # an agent, or "*" for the whole scheduler
        at = pw.DoubleField()

        class Meta:
            table_name = "paused"

    class CronTick(Base):
        agent = pw.TextField()
        tick = pw.DoubleField()
        claimed_at = pw.DoubleField()

        class Meta:
            table_name = "cron_ticks"
            indexes = ((("agent", "tick"), True),)

    class Delivery(Base):
        source = pw.TextField()
        delivery_id = pw.TextField(null=True)
        at = pw.DoubleField(index=True)
        headers = JSONText()
        body = pw.BlobField()
        status = pw.IntegerField()
        result = pw.TextField()
        matched = JSONText()

        class Meta:
            table_name = "deliveries"
            indexes = ((("source", "delivery_id"), True),)

    class Host(Base):
        name = pw.TextField(primary_key=True)
        info = JSONText()
        heartbeat_at = pw.DoubleField()

        class Meta:
            table_name = "hosts"

    class MetaKV(Base):
        key = pw.TextField(primary_key=True)
        value = pw.TextField()

        class Meta:
            table_name = "meta"

    tables = [
        WorkItem, Run, RunEvent, StatusMessage, Call, Lock, LockWait, AgentState, AgentEvent,
        Paused, CronTick, Delivery, Host, MetaKV,
    ]  # fmt: skip
    return SimpleNamespace(tables=tables, **{model.__name__: model for model in tables})


# ---------------------------------------------------------------------------------- helpers
P = ParamSpec("P")
T = TypeVar("T")


def _guarded(method: Callable[P, T]) -> Callable[P, T]:
    """Turn a database failure into one StoreError line naming the database and what to do."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except StoreError:
            raise
        except (pw.PeeweeException, sqlite3.Error, OSError) as exc:
            store = args[0]
            store._drop_broken_connection()
            raise StoreError(_explain(store._where, store._timeout, exc)) from exc

    return wrapper


def _explain(where: str, timeout: float, exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    low = text.lower()
    if "://" in where:  # a server: the file-level advice below does not apply
        return f"database {where}: {text}"
    if "locked" in low or "busy" in low:
        return (
            f"database {where} is locked: another process held it past the {timeout:g}s busy "
            "timeout; retry, or stop the process that holds it"
        )
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return (
            f"database {where} is corrupt ({text}): move it aside to start afresh "
            "(queued work in it is lost) or restore a backup"
        )
    if "readonly" in low or "read-only" in low or "unable to open" in low or "denied" in low:
        return f"database {where} cannot be written ({text}): check the permissions of the file and its directory"
    if "full" in low or "no space" in low:
        return f"database {where}: the disk is full ({text}); free some space and retry"
    return f"database {where}: {text}"


def _display_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def _connect(url: str, root: str | None) -> tuple[pw.Database, str, float]:
    """A peewee database for ``url``, its display name and its busy timeout."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    timeout = float(query.pop("timeout", BUSY_TIMEOUT))
    if parts.scheme == "sqlite":
        name = parts.path[1:] if parts.path.startswith("/") else parts.path
        if name in ("", ":memory:"):
            raise StoreError(f"database {url}: needs a file path (the queue must be durable)")
        path = Path(name) if Path(name).is_absolute() else Path(root or ".") / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(_explain(str(path), timeout, exc)) from exc
        db = pw.SqliteDatabase(
            str(path), pragmas=SQLITE_PRAGMAS, timeout=timeout, lock_type="IMMEDIATE"
        )
        return db, str(path), timeout
    from playhouse import db_url  # late: it loads the PostgreSQL driver, which SQLite never needs

    try:
        db = db_url.connect(
            parts._replace(query=urlencode(query)).geturl(),
            unquote_password=True,
            unquote_user=True,
        )
    except (RuntimeError, ValueError) as exc:
        raise StoreError(f"database {_display_url(url)}: {exc}") from exc
    if not isinstance(db, pw.PostgresqlDatabase):
        raise StoreError(
            f"database {_display_url(url)}: only sqlite:// and postgresql:// are supported"
        )
    return db, _display_url(url), timeout


_SQLITE_WRITERS: dict[str, threading.RLock] = {}
_SQLITE_WRITERS_GUARD = threading.Lock()


def _sqlite_writer(path: str) -> threading.RLock:
    """The process-wide write mutex of one SQLite file (re-entrant: transactions nest)."""
    with _SQLITE_WRITERS_GUARD:
        return _SQLITE_WRITERS.setdefault(os.path.realpath(path), threading.RLock())


def _columns(names: tuple[str, ...] | list[str]) -> str:
    """Quoted column names for SQL (some are keywords: trigger, at, type, key, value)."""
    return ", ".join(f'"{name}"' for name in names)


def _marks(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join("?" for _ in names)


def _assignments(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f'"{name}" = ?' for name in names)


@functools.lru_cache(maxsize=1024)
def _state_data(before: str | None, state: str, reason: str | None, exit_code: int | None) -> str:
    """The JSON of a ``state`` run event (cached: most transitions repeat a few reasons)."""
    data: dict[str, Any] = {"from": before, "to": state, "reason": reason}
    if exit_code is not None:
        data["exit_code"] = exit_code
    return _dumps(data)


def _new_run_id(agent: str) -> str:
    return f"{agent}-{secrets.token_hex(4)}"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


# ---------------------------------------------------------------------------------- store
class Store:
    """Open with ``Store.open(url, root)``; the schema is created or migrated on open."""

    def __init__(
        self, db: pw.Database, where: str, timeout: float, clock: Callable[[], float]
    ) -> None:
        self._db = db
        self._where = where
        self._timeout = timeout
        self._clock = clock
        self._pg = isinstance(db, pw.PostgresqlDatabase)
        self._writer = contextlib.nullcontext() if self._pg else _sqlite_writer(where)
        self._m = _define_models(db)
        self._sql = self._prepare_sql()
        run_fields = [self._m.Run._meta.fields[name] for name in _RUN_COLUMNS]
        # Only JSON and boolean columns need converting; the rest come back as stored.
        self._run_reads = [
            (index, field.python_value)
            for index, field in enumerate(run_fields)
            if isinstance(field, JSONText | pw.BooleanField)
        ]
        self._run_json = [field.name for field in run_fields if isinstance(field, JSONText)]
        self._run_writes = {field.name: field.db_value for field in run_fields}
        # Statements built from column names at run time, written once each.
        self._built: dict[tuple[Any, ...], str] = {}

    @classmethod
    def open(
        cls, url: str, root: str | None = None, *, clock: Callable[[], float] | None = None
    ) -> Store:
        """Connect (relative sqlite paths are under ``root``), create/migrate the schema.

        ``clock`` (default ``llamaherd.clock.clock``, which honours AL_FAKE_CLOCK_FILE) stamps
        every time the store writes: lock expiry, events, runs."""
        if clock is None:
            from llamaherd.clock import clock
        db, where, timeout = _connect(url or DEFAULT_URL, root)
        store = cls(db, where, timeout, clock)
        store._migrate()
        return store

    @_guarded
    def close(self) -> None:
        """Close this thread's connection (other threads' close when they end)."""
        self._db.close()

    @property
    def url_display(self) -> str:
        """The database path or URL, without a password."""
        return self._where

    # ------------------------------------------------------------ internals
    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction around several calls (each joins it): all or nothing."""
        try:
            with self._write():
                yield
        except StoreError:
            raise
        except (pw.PeeweeException, sqlite3.Error, OSError) as exc:
            self._drop_broken_connection()
            raise StoreError(_explain(self._where, self._timeout, exc)) from exc

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction: BEGIN IMMEDIATE on SQLite, READ COMMITTED on PostgreSQL.

        On SQLite the threads of one process also queue on a mutex first: SQLite's busy handler
        polls in steps of milliseconds, a mutex hands over at once. The SQLite transaction is
        driven on the connection itself (peewee's transaction objects cost more than a commit
        of a queue item); a nested call joins the open transaction."""
        if self._pg:
            with self._db.atomic():
                yield
            return
        with self._writer:
            conn = self._db.connection()
            if conn.in_transaction:
                yield
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                try:
                    if conn.in_transaction:
                        conn.rollback()
                except sqlite3.Error:
                    self._db.close()  # never join a transaction that could not be rolled back
                raise

    def _drop_broken_connection(self) -> None:
        """After a failure, close this thread's connection if it is dead (a restarted
        PostgreSQL server), so the next call connects afresh instead of failing forever."""
        if self._pg and not self._db.is_closed() and not self._db.is_connection_usable():
            with contextlib.suppress(pw.PeeweeException):
                self._db.close()

    def _exec(self, sql: str, params: tuple | list = ()) -> Any:
        """Run one statement on this thread's connection; return the cursor."""
        if self._pg:
            return self._db.execute_sql(sql, params)
        return self._db.connection().execute(sql, params)

    def _value(self, sql: str, params: tuple | list = ()) -> Any:
        """The first column of the first row, or None when there is no row."""
        row = self._exec(sql, params).fetchone()
        return None if row is None else row[0]

    def _insert(self, table: str, values: dict[str, Any], suffix: str = "") -> Any:
        """INSERT ``values`` into ``table`` (with ``suffix``: ON CONFLICT, RETURNING); columns
        whose value is None are left out, to their NULL default (binding None costs more)."""
        names = tuple(name for name, value in values.items() if value is not None)
        sql = self._statement(
            ("insert", table, names, suffix),
            lambda: f"INSERT INTO {table} ({_columns(names)}) VALUES ({_marks(names)}) {suffix}",
        )
        return self._exec(sql, [values[name] for name in names])

    def _statement(self, key: tuple[Any, ...], build: Callable[[], str]) -> str:
        """A statement that depends on column names, built once per ``key``."""
        sql = self._built.get(key)
        if sql is None:
            sql = self._built[key] = " ".join(build().split()).replace("?", self._db.param)
        return sql

    def _upsert(self, model: type[pw.Model], **values: Any) -> None:
        """Insert or overwrite by primary key (portable, unlike REPLACE)."""
        meta = model._meta
        names = tuple(values)

        def build() -> str:
            key = meta.primary_key.name
            sets = ", ".join(f'"{name}" = excluded."{name}"' for name in names if name != key)
            return (
                f"INSERT INTO {meta.table_name} ({_columns(names)}) VALUES ({_marks(names)}) "
                f'ON CONFLICT ("{key}") DO UPDATE SET {sets}'
            )

        sql = self._statement(("upsert", meta.table_name, names), build)
        self._exec(sql, [meta.fields[name].db_value(values[name]) for name in names])

    def _pg_lock(self, kind: int, key: str | None = None) -> None:
        """Serialise with other PostgreSQL sessions until this transaction ends."""
        if self._pg:
            if key is None:
                self._exec("SELECT pg_advisory_xact_lock(%s, 0)", (kind,))
            else:
                self._exec("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (kind, key))

    def _prepare_sql(self) -> SimpleNamespace:
        """Every hot-path statement, written once with this backend's placeholder: peewee's
        query builder costs more than the query itself on SQLite."""

        def q(sql: str) -> str:
            return " ".join(sql.split()).replace("?", self._db.param)

        item_cols = _columns(_ITEM_COLUMNS)
        runs = f"SELECT {_columns(_RUN_COLUMNS)} FROM runs"
        lock = " FOR UPDATE SKIP LOCKED" if self._pg else ""
        queued = "FROM work_items WHERE state = 'queued' AND agent = ?"
        return SimpleNamespace(
            running="SELECT agent, COUNT(*) FROM runs WHERE state = 'running' GROUP BY agent",
            running_one=q("SELECT COUNT(*) FROM runs WHERE state = 'running' AND agent = ?"),
            # Each agent's oldest queued item: one pass over the queued-items partial index,
            # so bounded by the queues' limits.
            heads=q(
                f"SELECT {item_cols} FROM work_items WHERE id IN (SELECT MIN(id) FROM work_items "
                f"WHERE state = 'queued' AND {_RESUME_HERE} GROUP BY agent)"
            ),
            take=q(f"SELECT {item_cols} {queued} AND {_RESUME_HERE} ORDER BY id LIMIT 1{lock}"),
            get_run=q(f"{runs} WHERE id = ?"),
            lock_run=q(f"{runs} WHERE id = ?{' FOR UPDATE' if self._pg else ''}"),
            runs_prefix=q(f"{runs} WHERE SUBSTR(id, 1, ?) = ? LIMIT 2"),
            waiting=f"{runs} WHERE state = 'waiting' ORDER BY created_at",
            wait_filters=(
                "SELECT id, agent, wait_filter FROM runs WHERE state = 'waiting' ORDER BY created_at"
            ),
            expired=q(f"{runs} WHERE state = 'waiting' AND wait_deadline <= ?"),
            drop_locks=q("DELETE FROM locks WHERE run_id = ?"),
            drop_waits=q("DELETE FROM lock_waits WHERE run_id = ?"),
            # SKIP LOCKED: a resume item being claimed right now is left to that claim, which
            # then finds the run ended (locking it the other way round could deadlock).
            end_items=q(
                "UPDATE work_items SET state = 'done' WHERE id IN (SELECT id FROM work_items "
                f"WHERE id = ? OR (run_id = ? AND state = 'queued'){lock})"
            ),
            settle_call=q(
                "UPDATE calls SET state = ?, return_value = ?, error = ?, finished_at = ? "
                "WHERE id = ? AND run_id = ? AND state = 'pending'"
            ),
            call_of=q("SELECT caller_run, depth FROM calls WHERE id = ?"),
            call_run=q("UPDATE calls SET run_id = ?, state = 'pending' WHERE id = ?"),
            drop_call=q(
                "UPDATE calls SET state = 'error', error = ?, finished_at = ? "
                "WHERE id = ? AND run_id IS NULL AND state = 'pending'"
            ),
            item_state=q("UPDATE work_items SET state = ? WHERE id = ?"),
            event=q('INSERT INTO run_events (run_id, "at", "type", data) VALUES (?, ?, ?, ?)'),
            status=q('INSERT INTO status_messages (run_id, "at", "text") VALUES (?, ?, ?)'),
            dedupe=q("SELECT 1 FROM work_items WHERE dedupe_key = ?"),
            coalesce=q(f"SELECT 1 {queued} AND kind = ? LIMIT 1"),
            # Counted on the queued-items index alone; resume items (never counted against the
            # limit, and rare) are subtracted only when the queue looks full.
            depth_all=q(f"SELECT COUNT(*) {queued}"),
            depth=q(f"SELECT COUNT(*) {queued} AND kind <> 'resume'"),
            oldest=q(
                f"SELECT id, kind, created_at, call_id {queued} AND kind <> 'resume' "
                "ORDER BY id LIMIT ?"
            ),
            pending_resume=q(
                "SELECT 1 FROM work_items WHERE run_id = ? AND kind = 'resume' "
                "AND state = 'queued' LIMIT 1"
            ),
            agent_event=q(
                'INSERT INTO agent_events (agent, "at", "type", data) VALUES (?, ?, ?, ?)'
            ),
            agent_state=q("SELECT state FROM agent_states WHERE agent = ?"),
            agent_states="SELECT agent, state FROM agent_states",
            paused='SELECT "name" FROM paused',
            delivery_seen=q(
                "SELECT 1 FROM deliveries WHERE source = ? AND delivery_id = ? LIMIT 1"
            ),
            insert_delivery=q(
                'INSERT INTO deliveries (source, delivery_id, "at", headers, body, status, '
                "result, matched) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
            ),
            insert_tick=q(
                "INSERT INTO cron_ticks (agent, tick, claimed_at) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING"
            ),
            last_tick=q("SELECT MAX(tick) FROM cron_ticks WHERE agent = ?"),
            lock_row=q(
                f"SELECT run_id, acquired_at, expires_at FROM locks WHERE uri = ?"
                f"{' FOR UPDATE' if self._pg else ''}"
            ),
            expire_locks=q("DELETE FROM locks WHERE expires_at <= ?"),
            lock_wait=q("SELECT uri FROM lock_waits WHERE run_id = ?"),
            stop_waiting=q("DELETE FROM lock_waits WHERE run_id = ? AND uri = ?"),
            release_lock=q("DELETE FROM locks WHERE uri = ? AND run_id = ?"),
            extend_locks=q("UPDATE locks SET expires_at = ? WHERE run_id = ?"),
            extend_lock=q("UPDATE locks SET expires_at = ? WHERE run_id = ? AND uri = ?"),
            unpause=q('DELETE FROM paused WHERE "name" = ?'),
            insert_call=q(
                'INSERT INTO calls (caller_run, target, context, depth, "state", created_at) '
                "VALUES (?, ?, ?, ?, 'pending', ?) RETURNING id"
            ),
            get_call=q(f"SELECT {_columns(_CALL_COLUMNS)} FROM calls WHERE id = ?"),
            events=q(
                'SELECT id, "at", "type", data FROM run_events WHERE run_id = ? AND id > ? '
                "ORDER BY id"
            ),
            status_messages=q(
                'SELECT id, "at", "text" FROM status_messages WHERE run_id = ? ORDER BY id'
            ),
        )

    def _schema_version(self) -> int:
        """The stamped version; 1 for a database from before versioning; 0 when empty."""
        if self._m.MetaKV.table_exists():
            row = self._m.MetaKV.get_or_none(self._m.MetaKV.key == "schema_version")
            if row is not None:
                return int(row.value)
        return 1 if self._m.WorkItem.table_exists() else 0

    def _migrate(self) -> None:
        try:
            if self._schema_version() == migrations.SCHEMA_VERSION:
                return
            with self._write():
                self._pg_lock(_PG_SCHEMA)
                have = self._schema_version()  # again: another process may have just done it
                if have > migrations.SCHEMA_VERSION:
                    raise StoreError(
                        f"database {self._where} has schema version {have}, newer than this "
                        f"llamaherd knows ({migrations.SCHEMA_VERSION}): upgrade llamaherd"
                    )
                if have == 0:
                    self._db.create_tables(self._m.tables)
                else:
                    migrations.upgrade(self._db, self._m, have)
                    self._db.create_tables(self._m.tables, safe=True)
                self._upsert(
                    self._m.MetaKV, key="schema_version", value=str(migrations.SCHEMA_VERSION)
                )
        except StoreError:
            raise
        except (pw.PeeweeException, sqlite3.Error, OSError) as exc:
            raise StoreError(_explain(self._where, self._timeout, exc)) from exc

    # ------------------------------------------------------------ queue
    @_guarded
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
        ``dropped`` agent event and a log line. ``resume`` items are neither counted nor
        dropped. An item carrying ``call_id`` (a retried call) puts that call back to pending."""
        sql = self._sql
        with self._write():
            self._pg_lock(_PG_QUEUE, agent)
            if dedupe_key is not None and self._exec(sql.dedupe, (dedupe_key,)).fetchone():
                return None
            if coalesce and self._exec(sql.coalesce, (agent, kind)).fetchone():
                return None
            if kind != "resume":
                self._drop_overflow(agent, max(limit, 1))
            if call_id is not None:
                self._exec(sql.call_run, (None, call_id))
            item = {
                "agent": agent, "kind": kind, "payload": _dumps(payload), "prompt": prompt or "",
                "source": source, "run_id": run_id, "call_id": call_id,
                "recovery": None if recovery is None else _dumps(recovery),
                "rerun_count": rerun_count, "created_at": self._clock(), "dedupe_key": dedupe_key,
                "state": "queued",
            }  # fmt: skip
            # DO NOTHING: a dedupe key a concurrent host committed since the check gives no row.
            inserted = self._insert("work_items", item, "ON CONFLICT DO NOTHING RETURNING id")
            row = inserted.fetchone()
            return None if row is None else row[0]

    def _drop_overflow(self, agent: str, limit: int) -> None:
        if self._value(self._sql.depth_all, (agent,)) < limit:
            return
        depth = self._value(self._sql.depth, (agent,))
        if depth < limit:
            return
        now = self._clock()
        victims = self._exec(self._sql.oldest, (agent, depth - limit + 1)).fetchall()
        for item_id, kind, created_at, call_id in victims:
            self._exec(self._sql.item_state, ("dropped", item_id))
            if call_id is not None:  # never served: its caller must stop waiting
                reason = f"the queue of {agent} was full: the call was dropped"
                self._exec(self._sql.drop_call, (reason, now, call_id))
            data = {"item_id": item_id, "kind": kind, "created_at": created_at, "limit": limit}
            self._exec(self._sql.agent_event, (agent, now, "dropped", _dumps(data)))
            log.warning(
                "queue of agent %s is full (%d items): dropped its oldest item %d (%s)",
                agent, limit, item_id, kind,
            )  # fmt: skip

    @_guarded
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
        ``resume`` item moves its waiting run back to ``running``, with the resume payload in
        ``run.trigger["resume_payload"]`` (and in the returned item's ``payload``). Returns None
        when nothing can be claimed.

        Fairness: among agents with room, the one with the fewest running runs goes first, ties
        to the oldest item. Agents missing from ``scales``, at 0, or in ``paused`` are skipped."""
        skip = paused or set()
        wanted = {
            agent: scale for agent, scale in scales.items() if scale > 0 and agent not in skip
        }
        if not wanted or (global_scale is not None and global_scale <= 0):
            return None  # decided without a transaction: a paused scheduler takes no write lock
        with self._write():
            if global_scale is not None:
                self._pg_lock(_PG_GLOBAL)
            running = dict(self._exec(self._sql.running).fetchall())
            if global_scale is not None and sum(running.values()) >= global_scale:
                return None
            room = {agent for agent, scale in wanted.items() if running.get(agent, 0) < scale}
            for _ in range(10 if room else 0):  # a stale resume item is retired, search again
                # Queue heads of agents with room: fewest running first, then oldest item.
                heads = sorted(
                    (running.get(row[1], 0), row[0], row)  # (id, agent, ...) as in _ITEM_COLUMNS
                    for row in self._heads(room, host)
                )
                for _, _, head in heads:
                    item = self._lock_head(head, scales[head[1]], host)
                    if item is None:
                        continue
                    claimed = self._take(item, host)
                    if claimed is not None:
                        return claimed
                    break
                else:
                    return None
        return None

    @_guarded
    def claim_resume(self, run_id: str, host: str) -> tuple[WorkItemRow, RunRow] | None:
        """Claim the queued ``resume`` item of waiting run ``run_id`` now, whatever its agent's
        scale (a suspended run holds its slot): the run goes back to ``running`` on ``host``.
        None when it has no resume item ``host`` may claim."""
        if not self._value(self._sql.pending_resume, (run_id,)):
            return None  # decided without a write lock: the dispatcher asks on every pass
        lock = " FOR UPDATE SKIP LOCKED" if self._pg else ""
        sql = self._statement(
            ("claim_resume",),
            lambda: (
                f"SELECT {_columns(_ITEM_COLUMNS)} FROM work_items WHERE run_id = ? "
                f"AND kind = 'resume' AND state = 'queued' AND {_RESUME_HERE} "
                f"ORDER BY id LIMIT 1{lock}"
            ),
        )
        with self._write():
            row = self._exec(sql, (run_id, host)).fetchone()
            return None if row is None else self._take_resume(self._item(row), host, self._clock())

    @_guarded
    def call_ids(self, caller_run: str) -> list[int]:
        """The ids of the calls ``caller_run`` made, in order (its call 1, 2, ...)."""
        sql = self._statement(
            ("call_ids",), lambda: "SELECT id FROM calls WHERE caller_run = ? ORDER BY id"
        )
        return [row[0] for row in self._exec(sql, (caller_run,)).fetchall()]

    def _heads(self, room: set[str], host: str) -> list[tuple]:
        """The oldest item ``host`` may claim of each agent in ``room``. Few agents: one index
        seek each, so the cost does not grow with the queue; many: one pass over the queued
        items."""
        if len(room) > _SEEK_AGENTS:
            rows = self._exec(self._sql.heads, (host,)).fetchall()
            return [row for row in rows if row[1] in room]
        agents = sorted(room)

        def build() -> str:
            values = ", ".join("(?)" for _ in agents)
            return (
                f"WITH room(agent) AS (VALUES {values}) SELECT {_columns(_ITEM_COLUMNS)} "
                "FROM work_items WHERE id IN (SELECT (SELECT MIN(w.id) FROM work_items w "
                f"WHERE w.state = 'queued' AND w.agent = room.agent AND {_RESUME_HERE}) FROM room)"
            )

        statement = self._statement(("heads", len(agents)), build)
        return self._exec(statement, [*agents, host]).fetchall()

    def _lock_head(self, head: tuple, scale: int, host: str) -> WorkItemRow | None:
        """The item to claim. SQLite: the head itself (BEGIN IMMEDIATE already excludes every
        other writer). PostgreSQL: take the agent's claim lock, recount its running runs, and
        lock its oldest item no other scheduler holds (SKIP LOCKED)."""
        if not self._pg:
            return self._item(head)
        agent = head[1]
        self._pg_lock(_PG_CLAIM, agent)
        if self._value(self._sql.running_one, (agent,)) >= scale:
            return None
        row = self._exec(self._sql.take, (agent, host)).fetchone()
        return None if row is None else self._item(row)

    def _take(self, item: WorkItemRow, host: str) -> tuple[WorkItemRow, RunRow] | None:
        now = self._clock()
        if item.kind == "resume":
            return self._take_resume(item, host, now)
        trigger = {
            "kind": item.kind,
            "payload": item.payload,
            "prompt": item.prompt,
            "source": item.source,
            "recovery": item.recovery,
        }
        caller_run, depth = None, 0
        if item.call_id is not None:
            found = self._exec(self._sql.call_of, (item.call_id,)).fetchone()
            caller_run, depth = found if found else (None, 0)
        run = self._blank_run(item.agent, item.kind, host, now, trigger)
        run.item_id, run.call_id, run.rerun_count = item.id, item.call_id, item.rerun_count
        run.caller_run, run.call_depth = caller_run, depth
        self._insert_run(run, "claimed")
        self._exec(self._sql.item_state, ("claimed", item.id))
        if item.call_id is not None:
            self._exec(self._sql.call_run, (run.id, item.call_id))
        return item, run

    def _take_resume(
        self, item: WorkItemRow, host: str, now: float
    ) -> tuple[WorkItemRow, RunRow] | None:
        run = self._fetch_run(item.run_id, lock=True) if item.run_id else None
        if run is None or run.state != "waiting":
            self._exec(self._sql.item_state, ("done", item.id))  # its run ended meanwhile
            return None
        trigger = dict(run.trigger or {}, resume_payload=item.payload)
        self._apply(
            run, "running", "resumed", None, now,
            host=host, trigger=trigger, wait_filter=None, wait_deadline=None,
        )  # fmt: skip
        self._exec(self._sql.item_state, ("claimed", item.id))
        return item, run

    @staticmethod
    def _blank_run(
        agent: str, kind: str, host: str | None, now: float, trigger: dict[str, Any]
    ) -> RunRow:
        return RunRow(
            id=_new_run_id(agent), agent=agent, state="running", trigger_kind=kind, item_id=None,
            host=host, created_at=now, started_at=now, finished_at=None, exit_code=None,
            reason=None, status=None, return_value=None, call_depth=0, caller_run=None,
            call_id=None, rerun_count=0, rerun_requested=False, sandbox=None, transcript=None,
            wait_filter=None, wait_deadline=None, deadline=None, input_tokens=0, output_tokens=0,
            token_hash=None, trigger=trigger,
        )  # fmt: skip

    def _insert_run(self, run: RunRow, reason: str) -> None:
        """Insert ``run`` and its first state event; should its random id be taken already,
        it draws another."""
        values = dict(zip(_RUN_COLUMNS, _run_values(run), strict=True))
        for name in self._run_json:
            if values[name] is not None:
                values[name] = _dumps(values[name])
        while self._insert("runs", values, "ON CONFLICT DO NOTHING").rowcount == 0:
            run.id = values["id"] = _new_run_id(run.agent)
        event = _state_data(None, "running", reason, None)
        self._exec(self._sql.event, (run.id, run.created_at, "state", event))

    @staticmethod
    def _item(row: tuple) -> WorkItemRow:
        item = WorkItemRow(*row)  # the columns are selected in field order (_ITEM_COLUMNS)
        item.payload = json.loads(item.payload)
        if item.recovery is not None:
            item.recovery = json.loads(item.recovery)
        return item

    def _run_row(self, row: tuple) -> RunRow:
        """A RunRow from a row of ``_RUN_COLUMNS`` (JSON and boolean columns decoded)."""
        values = list(row)
        for index, read in self._run_reads:
            values[index] = read(values[index])
        return RunRow(*values)

    def _run_rows(self, sql: str, params: tuple | list = ()) -> list[RunRow]:
        return [self._run_row(row) for row in self._exec(sql, params).fetchall()]

    def _fetch_run(self, run_id: str, lock: bool = False) -> RunRow | None:
        """One run by id; ``lock``: FOR UPDATE on PostgreSQL."""
        row = self._exec(self._sql.lock_run if lock else self._sql.get_run, (run_id,)).fetchone()
        return None if row is None else self._run_row(row)

    def _update_run(self, run_id: str, changes: dict[str, Any]) -> None:
        names = tuple(changes)
        sql = self._statement(
            ("update_run", names), lambda: f"UPDATE runs SET {_assignments(names)} WHERE id = ?"
        )
        writes = self._run_writes
        self._exec(sql, [*(writes[name](changes[name]) for name in names), run_id])

    @_guarded
    def queue_depth(self, agent: str | None = None) -> dict[str, int]:
        """Queued items per agent (agents with none are absent unless asked for by name)."""
        if agent is not None:
            return {agent: self._value(self._sql.depth_all, (agent,))}
        sql = "SELECT agent, COUNT(*) FROM work_items WHERE state = 'queued' GROUP BY agent"
        return dict(self._exec(sql).fetchall())

    @_guarded
    def clear_queue(
        self,
        agent: str,
        reason: str = "its queued trigger was dropped",
        *,
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        """Delete queued items of ``agent`` but those of the kinds in ``keep``; return the count.
        An agent call such an item carried will never be served: it is settled as an error
        with ``reason``, so its caller stops waiting."""
        m = self._m
        where = (m.WorkItem.state == "queued") & (m.WorkItem.agent == agent)
        if keep:
            where &= m.WorkItem.kind.not_in(sorted(keep))
        with self._write():
            carried = m.WorkItem.select(m.WorkItem.call_id).where(
                where & m.WorkItem.call_id.is_null(False)
            )
            m.Call.update(state="error", error=reason, finished_at=self._clock()).where(
                m.Call.id.in_(carried) & m.Call.run_id.is_null() & (m.Call.state == "pending")
            ).execute()
            return m.WorkItem.delete().where(where).execute()

    # ------------------------------------------------------------ runs
    @_guarded
    def create_run(self, agent: str, trigger_kind: str, **fields: Any) -> RunRow:
        """A run in ``running`` not from the queue (foreground ``al run``). ``fields`` are run
        columns (host, trigger, call_id, ...); ``trigger`` defaults to the kind with an empty
        payload."""
        unknown = set(fields) - _PLAIN_RUN_COLUMNS
        if unknown:
            raise TypeError(f"create_run: not run columns: {', '.join(sorted(unknown))}")
        trigger = {"kind": trigger_kind, "payload": {}, "prompt": "", "source": None}
        with self._write():
            now = self._clock()
            run = self._blank_run(agent, trigger_kind, None, now, trigger)
            for name, value in fields.items():
                setattr(run, name, value)
            self._insert_run(run, "started in the foreground")
            if run.call_id is not None:
                self._exec(self._sql.call_run, (run.id, run.call_id))
            return run

    @_guarded
    def get_run(self, run_id: str) -> RunRow | None:
        return self._fetch_run(run_id)

    @_guarded
    def find_run(self, prefix: str) -> RunRow | None:
        """A run by full id or unique prefix (None when unknown or ambiguous)."""
        run = self._fetch_run(prefix)
        if run is None and prefix:
            found = self._run_rows(self._sql.runs_prefix, (len(prefix), prefix))
            run = found[0] if len(found) == 1 else None
        return run

    @_guarded
    def runs(
        self, agent: str | None = None, states: tuple[str, ...] | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Runs, newest first."""
        where = ["1 = 1"]
        params: list[Any] = []
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if states is not None:
            where.append(f"state IN ({_marks(states) or 'NULL'})")
            params.extend(states)

        def build() -> str:
            return (
                f"SELECT {_columns(_RUN_COLUMNS)} FROM runs WHERE {' AND '.join(where)} "
                "ORDER BY created_at DESC, id DESC LIMIT ?"
            )

        key = ("runs", agent is None, None if states is None else len(states))
        return self._run_rows(self._statement(key, build), [*params, limit])

    @_guarded
    def transition(
        self, run_id: str, state: str, reason: str | None = None, exit_code: int | None = None
    ) -> RunRow:
        """Move a run to ``state`` if TRANSITIONS allows it (else InvalidTransition), record a
        ``state`` event with time and reason. Entering a final state releases its locks, marks
        its work item done and settles its call record (done with return value, or error).
        ``exit_code`` defaults to EXIT_CODES[state] for a final state."""
        with self._write():
            run = self._locked_run(run_id)
            self._apply(run, state, reason, exit_code, self._clock())
            return run

    def _locked_run(self, run_id: str) -> RunRow:
        run = self._fetch_run(run_id, lock=True)
        if run is None:
            raise StoreError(f"no run {run_id!r} in database {self._where}")
        return run

    def _apply(
        self,
        run: RunRow,
        state: str,
        reason: str | None,
        exit_code: int | None,
        now: float,
        **extra: Any,
    ) -> None:
        """The one state change: checked against TRANSITIONS, recorded, cleaned up if final."""
        if state not in TRANSITIONS.get(run.state, ()):
            raise InvalidTransition(
                f"run {run.id} cannot go from {run.state} to {state}"
                f" (allowed: {', '.join(TRANSITIONS.get(run.state, ())) or 'none, it has ended'})"
            )
        before = run.state
        changes: dict[str, Any] = {"state": state, **extra}
        if state in FINAL_STATES:  # the run's reason is why it ended; others are in its events
            changes["reason"] = reason
            changes["finished_at"] = now
            changes["exit_code"] = EXIT_CODES[state] if exit_code is None else exit_code
        elif exit_code is not None:
            changes["exit_code"] = exit_code
        for name, value in changes.items():
            setattr(run, name, value)
        self._update_run(run.id, changes)
        data = _state_data(before, state, reason, changes.get("exit_code"))
        self._exec(self._sql.event, (run.id, now, "state", data))
        if state in FINAL_STATES:
            self._finish(run, now)

    def _finish(self, run: RunRow, now: float) -> None:
        """Release the run's locks, retire its item (and pending resumes), settle its call."""
        sql = self._sql
        self._exec(sql.drop_locks, (run.id,))
        self._exec(sql.drop_waits, (run.id,))
        self._exec(sql.end_items, (run.item_id, run.id))
        if run.call_id is None:
            return
        if run.state == "done":
            settle = ("done", _dumps(run.return_value), None)
        else:
            settle = ("error", None, f"{run.state}: {run.reason or 'no reason given'}")
        # Only while this run owns the call: a retry enqueued for it has taken it back.
        self._exec(sql.settle_call, (*settle, now, run.call_id, run.id))

    @_guarded
    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set plain columns: sandbox, deadline, host, status, rerun_requested, tokens..."""
        unknown = set(fields) - _PLAIN_RUN_COLUMNS
        if unknown:
            raise TypeError(f"update_run: cannot set {', '.join(sorted(unknown))}")
        if not fields:
            return
        with self._write():
            self._update_run(run_id, fields)

    @_guarded
    def checkpoint(self, run_id: str, transcript: list[dict[str, Any]]) -> None:
        """Store the run's transcript (after every turn)."""
        self.update_run(run_id, transcript=transcript)

    @_guarded
    def set_status(self, run_id: str, text: str) -> None:
        """Record a status message (kept as history) and make it the run's current status."""
        with self._write():
            self._exec(self._sql.status, (run_id, self._clock(), text))
            self._update_run(run_id, {"status": text})

    @_guarded
    def set_return(self, run_id: str, value: Any) -> None:
        """Set the run's return value (its caller gets it when the run ends done)."""
        with self._write():
            self._update_run(run_id, {"return_value": value})
            self._exec(self._sql.event, (run_id, self._clock(), "return", _dumps({"value": value})))

    @_guarded
    def add_event(self, run_id: str, type: str, data: dict[str, Any] | None = None) -> None:
        """Append a run event (also used for structured log lines: model_call, tool_call...)."""
        with self._write():
            self._exec(self._sql.event, (run_id, self._clock(), type, _dumps(data or {})))

    @_guarded
    def events(self, run_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        """Run events with id > after_id, oldest first: {id, at, type, data}."""
        sql = self._sql.events
        rows = self._exec(sql, (run_id, after_id)).fetchall()
        return [
            {"id": id, "at": at, "type": type, "data": json.loads(data) if data else {}}
            for id, at, type, data in rows
        ]

    @_guarded
    def status_messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's status history, oldest first: {id, at, text}."""
        rows = self._exec(self._sql.status_messages, (run_id,)).fetchall()
        return [{"id": id, "at": at, "text": text} for id, at, text in rows]

    @_guarded
    def active_count(self, agent: str | None = None) -> int:
        """Runs in ``running`` (the ones that count against scale; waiting runs do not)."""
        if agent is None:
            return sum(count for _, count in self._exec(self._sql.running).fetchall())
        return self._value(self._sql.running_one, (agent,))

    # ------------------------------------------------------------ waits
    @_guarded
    def set_waiting(self, run_id: str, wait_filter: dict[str, Any], deadline: float) -> None:
        """Transition running -> waiting with the filter and deadline stored (and the previous
        resume's ``trigger["resume_payload"]`` dropped: it is spent)."""
        with self._write():
            run = self._locked_run(run_id)
            trigger = {k: v for k, v in run.trigger.items() if k != "resume_payload"}
            self._apply(
                run, "waiting", "wait_for_trigger", None, self._clock(),
                wait_filter=wait_filter, wait_deadline=deadline, trigger=trigger,
            )  # fmt: skip

    @_guarded
    def waiting_runs(self) -> list[RunRow]:
        """Every run in ``waiting``, oldest first."""
        return self._run_rows(self._sql.waiting)

    @_guarded
    def wait_filters(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(run id, agent, filter) of every waiting run, oldest first: what matching an event
        needs, without loading transcripts (emit calls this for every trigger)."""
        rows = self._exec(self._sql.wait_filters).fetchall()
        return [(run_id, agent, json.loads(raw) if raw else None) for run_id, agent, raw in rows]

    @_guarded
    def resume_waiting(self, run_id: str, payload: dict[str, Any]) -> bool:
        """Enqueue a ``resume`` item for a waiting run once (False if already resumed or the
        run is not waiting). The dispatcher's claim then moves the run back to running."""
        with self._write():
            run = self._locked_run(run_id)
            if run.state != "waiting" or self._value(self._sql.pending_resume, (run_id,)):
                return False
            self.enqueue(run.agent, "resume", payload, run_id=run_id, source="resume")
            return True

    @_guarded
    def expired_waits(self, now: float) -> list[RunRow]:
        """Waiting runs whose wait deadline is at or before ``now``."""
        return self._run_rows(self._sql.expired, (now,))

    # ------------------------------------------------------------ calls
    @_guarded
    def create_call(self, caller_run: str, target: str, context: str, depth: int) -> int:
        """Record an agent call (pending until the run that serves it ends)."""
        with self._write():
            return self._value(
                self._sql.insert_call, (caller_run, target, context, depth, self._clock())
            )

    @_guarded
    def get_call(self, call_id: int) -> dict[str, Any] | None:
        """{id, caller_run, target, state: pending|done|error, return_value, error, run_id}."""
        row = self._exec(self._sql.get_call, (call_id,)).fetchone()
        if row is None:
            return None
        call = dict(zip(_CALL_COLUMNS, row, strict=True))
        call["return_value"] = self._m.Call.return_value.python_value(call["return_value"])
        return call

    # ------------------------------------------------------------ locks
    @_guarded
    def acquire_lock(self, run_id: str, uri: str, ttl: float) -> dict[str, Any]:
        """{"ok": True} or {"ok": False, "holder": run_id, "expires_at": t} or, when the holder
        is itself waiting on a lock this run holds, {"ok": False, "deadlock": [a, b], ...}.
        Expired locks are reclaimed first. Re-acquiring one's own lock extends it.

        A refused run is recorded as waiting for ``uri`` until it takes it, releases it or
        ends; a longer cycle of waits (a -> b -> c -> a) is refused too, naming every run."""
        sql = self._sql
        with self._write():
            now = self._clock()
            self._exec(sql.expire_locks, (now,))
            lock = self._exec(sql.lock_row, (uri,)).fetchone()  # (holder, acquired, expires)
            if lock is None or lock[0] == run_id:
                self._upsert(
                    self._m.Lock, uri=uri, run_id=run_id, expires_at=now + ttl,
                    acquired_at=lock[1] if lock else now,
                )  # fmt: skip
                self._exec(sql.drop_waits, (run_id,))
                return {"ok": True, "uri": uri, "expires_at": now + ttl}
            refused = {"ok": False, "holder": lock[0], "expires_at": lock[2]}
            cycle = self._wait_cycle(run_id, lock[0])
            if cycle:
                names = " -> ".join([*cycle, run_id])
                return {**refused, "deadlock": cycle, "message": f"deadlock: {names}"}
            self._upsert(self._m.LockWait, run_id=run_id, uri=uri, since=now)
            return refused

    def _wait_cycle(self, run_id: str, holder: str) -> list[str]:
        """[run_id, holder, ...] if following holder's waits leads back to run_id, else []."""
        chain = [run_id, holder]
        while len(chain) <= 64:
            uri = self._value(self._sql.lock_wait, (chain[-1],))
            next_holder = None if uri is None else self._value(self._sql.lock_row, (uri,))
            if next_holder is None or next_holder in chain[1:]:
                return []
            if next_holder == run_id:
                return chain
            chain.append(next_holder)
        return []

    @_guarded
    def release_lock(self, run_id: str, uri: str) -> bool:
        """Release ``uri`` if ``run_id`` holds it (and stop waiting for it); True if held."""
        with self._write():
            self._exec(self._sql.stop_waiting, (run_id, uri))
            return bool(self._exec(self._sql.release_lock, (uri, run_id)).rowcount)

    @_guarded
    def heartbeat_lock(self, run_id: str, uri: str | None, ttl: float) -> int:
        """Extend one (or, with uri None, all) of the run's locks; return how many."""
        with self._write():
            expires = self._clock() + ttl
            if uri is None:
                return self._exec(self._sql.extend_locks, (expires, run_id)).rowcount
            return self._exec(self._sql.extend_lock, (expires, run_id, uri)).rowcount

    @_guarded
    def release_all_locks(self, run_id: str) -> int:
        """Release every lock of ``run_id``; return how many."""
        with self._write():
            self._exec(self._sql.drop_waits, (run_id,))
            return self._exec(self._sql.drop_locks, (run_id,)).rowcount

    @_guarded
    def locks(self) -> list[dict[str, Any]]:
        """Live locks: {uri, holder, run_id (the same), acquired_at, expires_at}."""
        Lock = self._m.Lock
        query = Lock.select().where(Lock.expires_at > self._clock()).order_by(Lock.uri)
        return [
            {"uri": k.uri, "holder": k.run_id, "run_id": k.run_id, "acquired_at": k.acquired_at,
             "expires_at": k.expires_at}
            for k in query
        ]  # fmt: skip

    # ------------------------------------------------------------ agent states
    @_guarded
    def agent_state(self, agent: str) -> str:
        """Stored state: idle (default), hibernate, suspended, error, off."""
        return self._value(self._sql.agent_state, (agent,)) or "idle"

    @_guarded
    def agent_states(self) -> dict[str, str]:
        """Every stored agent state in one query (agents absent are ``idle``)."""
        return dict(self._exec(self._sql.agent_states).fetchall())

    @_guarded
    def set_agent_state(self, agent: str, state: str, cause: str) -> None:
        """Store the agent's state and record a ``state`` agent event with the cause."""
        if state not in AGENT_STATES:
            raise ValueError(f"agent state {state!r} is not one of {', '.join(AGENT_STATES)}")
        with self._write():
            now = self._clock()
            self._upsert(self._m.AgentState, agent=agent, state=state, cause=cause, updated_at=now)
            data = {"state": state, "cause": cause}
            self._exec(self._sql.agent_event, (agent, now, "state", _dumps(data)))

    @_guarded
    def add_agent_event(self, agent: str, type: str, data: dict[str, Any] | None = None) -> None:
        with self._write():
            self._exec(self._sql.agent_event, (agent, self._clock(), type, _dumps(data or {})))

    @_guarded
    def agent_events(self, agent: str, limit: int = 50) -> list[dict[str, Any]]:
        """The agent's latest ``limit`` events, oldest first: {id, at, type, data}."""
        E = self._m.AgentEvent
        query = E.select().where(E.agent == agent).order_by(E.id.desc()).limit(limit)
        return [{"id": e.id, "at": e.at, "type": e.type, "data": e.data or {}} for e in query][::-1]

    @_guarded
    def set_paused(self, agent: str | None, paused: bool) -> None:
        """Pause/resume one agent, or (agent None) the whole scheduler."""
        name = _PAUSED_ALL if agent is None else agent
        with self._write():
            if paused:
                self._upsert(self._m.Paused, name=name, at=self._clock())
            else:
                self._exec(self._sql.unpause, (name,))

    @_guarded
    def paused(self) -> tuple[bool, set[str]]:
        """(scheduler paused, paused agents)."""
        names = {name for (name,) in self._exec(self._sql.paused).fetchall()}
        return _PAUSED_ALL in names, names - {_PAUSED_ALL}

    # ------------------------------------------------------------ trigger ticks
    @_guarded
    def claim_tick(self, key: str, tick: float) -> bool:
        """True exactly once per (key, tick), across processes and hosts (a trigger's
        ``emit_once``; keys are ``<trigger type>:<its key>``)."""
        with self._write():
            return self._exec(self._sql.insert_tick, (key, tick, self._clock())).rowcount == 1

    @_guarded
    def last_tick(self, key: str) -> float | None:
        """The latest claimed tick of ``key``."""
        return self._value(self._sql.last_tick, (key,))

    # ------------------------------------------------------------ webhooks
    @_guarded
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
        """Keep a receipt; False when (source, delivery_id) was already recorded. A delivery
        answered with status >= 400 is a dead letter."""
        params = (
            source, delivery_id, self._clock(), _dumps(headers),
            self._m.Delivery.body.db_value(bytes(body)), status, result, _dumps(list(matched)),
        )  # fmt: skip
        with self._write():
            return self._exec(self._sql.insert_delivery, params).rowcount == 1

    @_guarded
    def delivery_seen(self, source: str, delivery_id: str) -> bool:
        return self._value(self._sql.delivery_seen, (source, delivery_id)) is not None

    @_guarded
    def deliveries(self, limit: int = 50, dead_letters: bool = False) -> list[dict[str, Any]]:
        """Receipts, newest first: {id, source, delivery_id, at, headers, body (bytes), status,
        result, matched}; ``dead_letters`` keeps only those answered with status >= 400."""
        D = self._m.Delivery
        query = D.select().order_by(D.id.desc()).limit(limit)
        if dead_letters:
            query = query.where(D.status >= 400)
        names = ("id", "source", "delivery_id", "at", "headers", "status", "result", "matched")
        return [{**{n: getattr(d, n) for n in names}, "body": bytes(d.body)} for d in query]

    # ------------------------------------------------------------ hosts and upkeep
    @_guarded
    def heartbeat_host(self, host: str, info: dict[str, Any]) -> None:
        """Record that scheduler ``host`` is alive now."""
        with self._write():
            self._upsert(self._m.Host, name=host, info=info, heartbeat_at=self._clock())

    @_guarded
    def stale_hosts(self, older_than: float) -> list[str]:
        """Hosts whose last heartbeat is before the time ``older_than`` (a timestamp)."""
        Host = self._m.Host
        query = Host.select(Host.name).where(Host.heartbeat_at < older_than).order_by(Host.name)
        return [name for (name,) in query.tuples()]

    @_guarded
    def hosts(self) -> list[dict[str, Any]]:
        """Every scheduler host that heartbeats: {host, info, heartbeat_at}, by name."""
        Host = self._m.Host
        return [
            {"host": h.name, "info": h.info, "heartbeat_at": h.heartbeat_at}
            for h in Host.select().order_by(Host.name)
        ]

    @_guarded
    def forget_host(self, host: str) -> None:
        """Drop a host's heartbeat row (after its runs were reconciled)."""
        with self._write():
            self._m.Host.delete().where(self._m.Host.name == host).execute()

    @_guarded
    def prune(self, days: float) -> int:
        """Delete finished runs, events, deliveries older than ``days``; return rows removed.
        The latest cron tick of each agent is kept (it is where the schedule resumes)."""
        m = self._m
        with self._write():
            cutoff = self._clock() - days * 86400
            old_runs = m.Run.select(m.Run.id).where(
                m.Run.state.in_(list(FINAL_STATES)) & (m.Run.finished_at < cutoff)
            )
            latest_ticks = m.CronTick.select(pw.fn.MAX(m.CronTick.id)).group_by(m.CronTick.agent)
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
                m.Delivery.delete().where(m.Delivery.at < cutoff),
                m.CronTick.delete().where(
                    (m.CronTick.tick < cutoff) & m.CronTick.id.not_in(latest_ticks)
                ),
            ]
            return sum(query.execute() for query in deletes)

    @_guarded
    def stats(self, agent: str | None = None, since: float | None = None) -> dict[str, Any]:
        """Run history: {runs, states, exit_codes, durations {p50, p95, max} (seconds, finished
        runs), tokens {input, output}, agents {name: the same per agent}, calls [{caller,
        target, count}] (the agent-call graph)}."""
        m = self._m
        query = m.Run.select(
            m.Run.agent, m.Run.state, m.Run.exit_code, m.Run.started_at, m.Run.finished_at,
            m.Run.input_tokens, m.Run.output_tokens,
        )  # fmt: skip
        calls = (
            m.Call.select(m.Run.agent, m.Call.target, pw.fn.COUNT(m.Call.id))
            .join(m.Run, on=(m.Call.caller_run == m.Run.id))
            .group_by(m.Run.agent, m.Call.target)
        )
        if agent is not None:
            query = query.where(m.Run.agent == agent)
            calls = calls.where((m.Run.agent == agent) | (m.Call.target == agent))
        if since is not None:
            query = query.where(m.Run.created_at >= since)
            calls = calls.where(m.Call.created_at >= since)
        rows = list(query.namedtuples())
        per_agent = {
            name: _summary([r for r in rows if r.agent == name])
            for name in sorted({r.agent for r in rows})
        }
        return {
            **_summary(rows),
            "since": since,
            "agents": per_agent,
            "calls": [{"caller": c, "target": t, "count": n} for c, t, n in calls.tuples()],
        }


def _summary(rows: list[Any]) -> dict[str, Any]:
    durations = sorted(
        r.finished_at - r.started_at for r in rows if r.finished_at and r.started_at is not None
    )
    exit_codes = Counter(str(r.exit_code) for r in rows if r.exit_code is not None)
    return {
        "runs": len(rows),
        "states": dict(Counter(r.state for r in rows)),
        "exit_codes": dict(exit_codes),
        "durations": {
            "p50": _percentile(durations, 0.50),
            "p95": _percentile(durations, 0.95),
            "max": durations[-1] if durations else None,
        },
        "tokens": {
            "input": sum(r.input_tokens for r in rows),
            "output": sum(r.output_tokens for r in rows),
        },
    }

"""The store's connection: opening a database, write transactions, errors, prepared statements.

Every other module of the store builds on ``Connection``: it runs one statement on this thread's
connection (``_exec``), groups statements into one write transaction (``_write``, and
``atomic()`` for callers), and turns a database failure into one ``StoreError`` line naming the
database and what to do (``guarded`` on each public method).

Group commit (SQLite). The hot writes (``grouped``: enqueue, claim, run transitions and events,
agent events, trigger ticks) and ``write(fn)`` are not run by the calling thread: they go to the
store's one writer thread, which takes every write waiting at that moment into one
``BEGIN IMMEDIATE`` ... ``COMMIT`` (each in its own savepoint, so one that fails spoils no
other) and answers each caller only after that commit. Concurrent HTTP workers thus never queue
on a Python lock one commit at a time: N deliveries cost one transaction. PostgreSQL has its own
concurrency: there every call is its own transaction on the caller's connection.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import peewee as pw

from llamaherd.errors import LlamaherdError

DEFAULT_URL = "sqlite:///.al/work-queue.db"
BUSY_TIMEOUT = 10.0
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",  # with WAL: durable against a killed process, fsync at checkpoints
    "cache_size": -16000,
    "temp_store": "memory",
}
# PostgreSQL advisory lock classes (first key of pg_advisory_xact_lock(int, int)), one place so
# no two concerns ever share one by accident.
PG_SCHEMA, PG_CLAIM, PG_QUEUE, PG_GLOBAL = 7401, 7402, 7403, 7404
# Errors of the database layer that mean "this database cannot be used right now".
DATABASE_ERRORS = (pw.PeeweeException, sqlite3.Error, OSError)


class StoreError(LlamaherdError):
    """The database cannot be used (corrupt, read-only, disk full, locked by another writer):
    the operation failed, ``al`` exits 1."""

    exit_code = 1


P = ParamSpec("P")
T = TypeVar("T")


def guarded(method: Callable[P, T]) -> Callable[P, T]:
    """Turn a database failure into one StoreError line naming the database and what to do."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except StoreError:
            raise
        except DATABASE_ERRORS as exc:
            raise args[0]._failure(exc) from exc  # type: ignore[attr-defined]

    return wrapper


def grouped(method: Callable[P, T]) -> Callable[P, T]:
    """Run a write method in the writer thread's next group commit (SQLite), unless this thread
    is already inside a write transaction (then it joins that one, as ``_write`` does)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        store = args[0]
        if store._joins():  # type: ignore[attr-defined]
            return method(*args, **kwargs)
        return store._group.submit(method, args, kwargs)  # type: ignore[attr-defined]

    return wrapper


def explain(where: str, timeout: float, exc: BaseException) -> str:
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


def display_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def connect(url: str, root: str | None, create: bool = True) -> tuple[pw.Database, str, float]:
    """A peewee database for ``url``, its display name and its busy timeout; ``create``: a
    SQLite file that does not exist yet is created (privately), else it is left missing."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    timeout = float(query.pop("timeout", BUSY_TIMEOUT))
    if parts.scheme == "sqlite":
        name = parts.path[1:] if parts.path.startswith("/") else parts.path
        if name in ("", ":memory:"):
            raise StoreError(f"database {url}: needs a file path (the queue must be durable)")
        path = Path(name) if Path(name).is_absolute() else Path(root or ".") / name
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if create:
                _create_private(path)
        except OSError as exc:
            raise StoreError(explain(str(path), timeout, exc)) from exc
        db = pw.SqliteDatabase(
            str(path), pragmas=SQLITE_PRAGMAS, timeout=timeout, lock_type="IMMEDIATE"
        )
        return db, str(path), timeout
    from playhouse import db_url  # late: it loads the PostgreSQL driver, which SQLite never needs

    if parts.scheme.startswith("postgres") and not _postgres_driver():
        from llamaherd.install import install_command

        raise StoreError(
            f"database {display_url(url)}: the PostgreSQL driver (psycopg2) is not installed; "
            f"install it with: {install_command('llamaherd', 'postgres')}"
        )
    try:
        db = db_url.connect(
            parts._replace(query=urlencode(query)).geturl(),
            unquote_password=True,
            unquote_user=True,
        )
    except (RuntimeError, ValueError) as exc:
        raise StoreError(f"database {display_url(url)}: {exc}") from exc
    if not isinstance(db, pw.PostgresqlDatabase):
        raise StoreError(
            f"database {display_url(url)}: only sqlite:// and postgresql:// are supported"
        )
    return db, display_url(url), timeout


def _postgres_driver() -> bool:
    """Whether psycopg2, peewee's PostgreSQL driver, can be imported."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return False
    return True


def _create_private(path: Path) -> None:
    """The database file created 0600 before SQLite opens it: it holds transcripts, and
    SQLite gives its ``-wal`` and ``-shm`` files the database file's mode."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))


_SQLITE_WRITERS: dict[str, threading.RLock] = {}
_SQLITE_WRITERS_GUARD = threading.Lock()


def _sqlite_writer(path: str) -> threading.RLock:
    """The process-wide write mutex of one SQLite file (re-entrant: transactions nest)."""
    with _SQLITE_WRITERS_GUARD:
        return _SQLITE_WRITERS.setdefault(os.path.realpath(path), threading.RLock())


@contextlib.contextmanager
def immediate(database: pw.Database) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` on this thread's SQLite connection, rolled back on
    failure; a connection that cannot be rolled back is closed, never joined again."""
    conn = database.connection()
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        try:
            if conn.in_transaction:
                conn.rollback()
        except sqlite3.Error:
            database.close()
        raise


class _Job:
    """One caller's write, waiting for the commit that holds it: on ``done`` (a blocked
    thread), or told through ``notify`` (an event loop's future)."""

    __slots__ = ("fn", "args", "kwargs", "done", "notify", "result", "error")

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict[str, Any],
        notify: Callable[[_Job], None] | None = None,
    ) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Event() if notify is None else None
        self.notify = notify
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        if self.notify is not None:
            self.notify(self)
        else:
            self.done.set()  # type: ignore[union-attr]


class GroupCommit:
    """The writer thread of one SQLite store: every write waiting when it wakes goes into one
    transaction, each caller is answered after that transaction's commit."""

    MAX_BATCH = 256  # writes per transaction: bounds how long a reader of the WAL waits

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self.ident: int | None = None

    def submit(self, fn: Callable[..., T], args: tuple, kwargs: dict[str, Any]) -> T:
        job = _Job(fn, args, kwargs)
        self.enqueue(job)
        job.done.wait()  # type: ignore[union-attr]
        if job.error is not None:
            raise job.error
        return job.result

    def enqueue(self, job: _Job) -> None:
        """Hand ``job`` to the writer thread without waiting (``job.finish`` tells)."""
        if self._thread is None:
            self._ensure_thread()
        self._jobs.put(job)

    def _ensure_thread(self) -> None:
        with self._start:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="store-writer", daemon=True)
                thread.start()
                self._thread = thread

    def stop(self) -> None:
        """End the writer thread after the writes already submitted (a later write starts a
        new one)."""
        with self._start:
            thread, self._thread = self._thread, None
        if thread is not None and thread.is_alive():
            self._jobs.put(None)
            thread.join()

    def _loop(self) -> None:
        self.ident = threading.get_ident()
        try:
            while True:
                first = self._jobs.get()
                if first is None:
                    return
                batch = [first]
                while len(batch) < self.MAX_BATCH:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        self._jobs.put(None)  # stop after this batch
                        break
                    batch.append(job)
                self._commit(batch)
        finally:
            self.ident = None
            with contextlib.suppress(Exception):
                self._conn._db.close()

    def _commit(self, batch: list[_Job]) -> None:
        conn = self._conn
        try:
            with conn._writer, immediate(conn._db) as db:
                self._run_all(db, batch)
        except BaseException as exc:  # the transaction failed: every write in it failed
            for job in batch:
                if job.error is None:
                    job.error = exc
        conn._ended()
        for job in batch:
            job.finish()

    @staticmethod
    def _run_all(db: sqlite3.Connection, batch: list[_Job]) -> None:
        """Each write in a savepoint when several share the transaction: all or nothing each."""
        alone = len(batch) == 1
        for job in batch:
            if not alone:
                db.execute("SAVEPOINT w")
            try:
                job.result = job.fn(*job.args, **job.kwargs)
            except BaseException as exc:
                job.error = exc
                if not alone:
                    db.execute("ROLLBACK TO w")
            if not alone:
                db.execute("RELEASE w")
        if alone and batch[0].error is not None:
            raise batch[0].error


# ---------------------------------------------------------------------------------- SQL text
def columns(names: tuple[str, ...] | list[str]) -> str:
    """Quoted column names for SQL (some are keywords: trigger, at, type, key, value)."""
    return ", ".join(f'"{name}"' for name in names)


def marks(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join("?" for _ in names)


def assignments(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f'"{name}" = ?' for name in names)


# (write: SQL with ``?`` placeholders -> this backend's SQL, postgres?) -> {name: statement}
Statements = Callable[[Callable[[str], str], bool], dict[str, str]]


def prepare(db: pw.Database, builders: Iterable[Statements]) -> SimpleNamespace:
    """Every hot-path statement of every concern, written once with this backend's placeholder
    (peewee's query builder costs more than the query itself on SQLite), as ``_sql.<name>``."""

    def write(sql: str) -> str:
        return " ".join(sql.split()).replace("?", db.param)

    pg = isinstance(db, pw.PostgresqlDatabase)
    prepared: dict[str, str] = {}
    for build in builders:
        statements = build(write, pg)
        clash = prepared.keys() & statements.keys()
        assert not clash, f"statement names used twice: {sorted(clash)}"
        prepared.update(statements)
    return SimpleNamespace(**prepared)


# ---------------------------------------------------------------------------------- connection
class Connection:
    """One database, shared by the threads of a process (peewee keeps a connection per thread)."""

    _m: SimpleNamespace  # the bound core models (``schema.define_models``)
    _sql: SimpleNamespace  # prepared statements (``prepare``)

    def __init__(
        self, db: pw.Database, where: str, timeout: float, clock: Callable[[], float]
    ) -> None:
        self._db = db
        self._where = where
        self._timeout = timeout
        self._clock = clock
        self._pg = isinstance(db, pw.PostgresqlDatabase)
        self._writer = contextlib.nullcontext() if self._pg else _sqlite_writer(where)
        self._group = GroupCommit(self)
        self._tx = threading.local()  # .depth: this thread's open ``_write`` blocks (SQLite)
        # Statements built from column names at run time, written once each.
        self._built: dict[tuple[Any, ...], str] = {}

    @property
    def url_display(self) -> str:
        """The database path or URL, without a password."""
        return self._where

    @property
    def shared(self) -> bool:
        """Whether schedulers of other hosts may share this database (PostgreSQL)."""
        return self._pg

    def clock(self) -> float:
        """The store's time (epoch seconds) that stamps what it writes: use it for rows of a
        plugin's own tables too, so they age with the rest (``prune``)."""
        return self._clock()

    @guarded
    def size(self) -> int | None:
        """Bytes the database takes (``al stat``): SQLite's file with its write-ahead log; on
        PostgreSQL the tables and indexes of its schema. None when it cannot tell."""
        if self._pg:
            row = self._db.execute_sql(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            ).fetchone()
            return int(row[0])
        try:
            return sum(
                os.path.getsize(p) for p in (self._where, self._where + "-wal") if os.path.exists(p)
            )
        except OSError:
            return None

    @guarded
    def close(self) -> None:
        """Stop the writer thread (after its pending writes) and close this thread's connection
        (other threads' close when they end)."""
        self._group.stop()
        self._db.close()

    @guarded
    def write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one write transaction (all or nothing), shared with concurrent
        writes on SQLite (group commit); returns its result once committed. ``fn`` runs in the
        store's writer thread there: it uses the store (and a plugin's ``tables``), nothing
        bound to the calling thread."""
        if self._joins():
            with self._write():
                return fn(*args)
        return self._group.submit(self._in_write, (fn, args), {})

    async def write_async(self, fn: Callable[..., T], *args: Any) -> T:
        """``write`` for an event loop: its thread is never blocked. On SQLite the write goes
        to the writer thread and the loop is told after the commit (one hand-over each way);
        on PostgreSQL it runs in the loop's default executor."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._pg:
            return await loop.run_in_executor(None, self.write, fn, *args)
        future: asyncio.Future[T] = loop.create_future()

        def settle(job: _Job) -> None:
            if future.done():  # the awaiting task was cancelled meanwhile
                return
            if job.error is None:
                future.set_result(job.result)
            else:
                error = job.error
                if isinstance(error, DATABASE_ERRORS):
                    error = self._failure(error)
                future.set_exception(error)

        job = _Job(
            self._in_write, (fn, args), {}, lambda job: loop.call_soon_threadsafe(settle, job)
        )
        self._group.enqueue(job)
        return await future

    def _in_write(self, fn: Callable[..., T], args: tuple) -> T:
        with self._write():
            return fn(*args)

    def _joins(self) -> bool:
        """Whether a write runs on this thread now: PostgreSQL (no writer thread), the writer
        thread itself, or a thread inside its own write transaction (``atomic``)."""
        return (
            self._pg
            or self._group.ident == threading.get_ident()
            or getattr(self._tx, "depth", 0) > 0
        )

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction around several calls (each joins it): all or nothing. A plugin
        writes its own tables inside one too; a database failure becomes a ``StoreError``."""
        with self.guard(), self._write():
            yield

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """A block whose database failures become one ``StoreError`` line (and a dead
        connection is dropped): for a plugin's reads of its own tables, outside ``atomic()``."""
        try:
            yield
        except StoreError:
            raise
        except DATABASE_ERRORS as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: BaseException) -> StoreError:
        self._drop_broken_connection()
        return StoreError(explain(self._where, self._timeout, exc))

    def _reason(self, exc: Exception) -> str:
        """One line on why a plugin's part failed: a database failure explained as core's are
        (and a dead connection dropped), anything else by its type and message."""
        if isinstance(exc, StoreError):
            return str(exc)
        if isinstance(exc, DATABASE_ERRORS):
            return str(self._failure(exc))
        return f"{type(exc).__name__}: {exc}"

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction: BEGIN IMMEDIATE on SQLite, READ COMMITTED on PostgreSQL.

        On SQLite the threads of one process also queue on a mutex first: SQLite's busy handler
        polls in steps of milliseconds, a mutex hands over at once. The SQLite transaction is
        driven on the connection itself (peewee's transaction objects cost more than a commit
        of a queue item); a nested call joins the open transaction."""
        if self._pg:
            try:
                with self._db.atomic():
                    yield
            finally:
                if not self._db.in_transaction():
                    self._ended()
            return
        with self._writer:
            conn = self._db.connection()
            if conn.in_transaction:
                yield
                return
            tx = self._tx
            tx.depth = getattr(tx, "depth", 0) + 1
            try:
                with immediate(self._db):
                    yield
            finally:
                tx.depth -= 1
        if not tx.depth:
            self._ended()

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Call ``fn`` once this thread's write transaction has ended (at once when it is in
        none), committed or not: for what must see the transaction's writes from another
        connection, such as waking the dispatcher to claim what was just queued."""
        if not self._writing():
            fn()
            return
        pending = getattr(self._tx, "after", None)
        if pending is None:
            pending = self._tx.after = []
        pending.append(fn)

    def _writing(self) -> bool:
        """Whether this thread is inside a write transaction."""
        if self._pg:
            return self._db.in_transaction()
        return self._group.ident == threading.get_ident() or getattr(self._tx, "depth", 0) > 0

    def _ended(self) -> None:
        """Call what waited for this thread's transaction to end (``after_commit``)."""
        pending = getattr(self._tx, "after", None)
        if pending:
            self._tx.after = []
            for fn in pending:
                fn()

    def _drop_broken_connection(self) -> None:
        """After a failure, close this thread's connection if it is dead (a restarted
        PostgreSQL server), so the next call connects afresh instead of failing forever."""
        if self._pg and not self._db.is_closed() and not self._db.is_connection_usable():
            with contextlib.suppress(pw.PeeweeException):
                self._db.close()

    def execute(self, sql: str, params: tuple | list = ()) -> Any:
        """Run one statement of a plugin's own tables (portable SQL with ``?`` placeholders)
        on this thread's connection; the cursor. For a hot path: the statement is rewritten
        for the backend once, then run as the store runs its own (no query builder, none of
        the ORM's per-call work). Inside ``write``/``atomic`` for a write, ``guard`` for a read."""
        return self._exec(self._statement(("execute", sql), lambda: sql), params)

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
            lambda: f"INSERT INTO {table} ({columns(names)}) VALUES ({marks(names)}) {suffix}",
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
                f"INSERT INTO {meta.table_name} ({columns(names)}) VALUES ({marks(names)}) "
                f'ON CONFLICT ("{key}") DO UPDATE SET {sets}'
            )

        sql = self._statement(("upsert", meta.table_name, names), build)
        self._exec(sql, [meta.fields[name].db_value(values[name]) for name in names])

    def _pg_lock(self, kind: int, key: str | None = None, wait: bool = True) -> bool:
        """Serialise with other PostgreSQL sessions until this transaction ends; without
        ``wait``, only if no other session holds the lock (whether it was taken). A keyed lock
        is per schema: projects sharing a database in their own schemas never wait on each
        other."""
        if not self._pg:
            return True
        call = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        if key is None:
            taken = self._value(f"SELECT {call}(%s, 0)", (kind,))
        else:
            keyed = f"SELECT {call}(%s, hashtext(current_schema() || '/' || %s))"
            taken = self._value(keyed, (kind, key))
        return wait or bool(taken)

"""The store's tables: core's models, plugins' table sets, and bringing both up to date on open.

Core's models are defined per database (``define_models``), so stores on different databases
coexist in one process. Core's schema versions and their steps are in ``migrations``.

A plugin's tables (a ``TableSet`` from the ``register_tables`` hook) live beside core's in the same
database and follow the same discipline: created when missing, brought forward by the plugin's
own steps in one transaction with the new version stamp (``meta`` row
``schema_version:<name>``), under the same PostgreSQL advisory lock as core's migration. A table
set that cannot be opened (its tables clash with another's, a step fails, the database holds a
newer version) is left out with one warning; the store and every other plugin keep working, and
``store.tables(name)`` says why.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import peewee as pw

from llamaherd.inbound import loads
from llamaherd.store import migrations
from llamaherd.store.connection import (
    DATABASE_ERRORS,
    PG_SCHEMA,
    Connection,
    StoreError,
    explain,
    guarded,
)

if TYPE_CHECKING:
    from llamaherd.types import TableSet

log = logging.getLogger(__name__)

STAMP = "schema_version"  # core's version in ``meta``; a table set's is ``schema_version:<name>``


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class JSONText(pw.TextField):
    """JSON in a TEXT column: the same text on every backend."""

    def db_value(self, value: Any) -> str | None:
        return None if value is None else dumps(value)

    def python_value(self, value: str | None) -> Any:
        return None if value is None else loads(value)


def define_models(db: pw.Database) -> SimpleNamespace:
    """Core's tables, bound to ``db``."""

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
        # Flow control (``llamaherd.flow``): the debounce key a later trigger folds into, the
        # priority, the time before which it is not claimed, and its per-control keys with
        # what it absorbed ({"keys": {...}, "count": n, "ids": [...], "first_at": t}).
        flow_key = pw.TextField(null=True)
        priority = pw.DoubleField(null=True)
        not_before = pw.DoubleField(null=True)
        flow = JSONText(null=True)

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
        flow_key = pw.TextField(null=True)  # its concurrency key (``[flow]``): active runs per key

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

    class TriggerTick(Base):
        """Ticks claimed once (``TriggerContext.emit_once``), keyed ``<trigger type>:<key>``."""

        key = pw.TextField()
        tick = pw.DoubleField()
        claimed_at = pw.DoubleField()

        class Meta:
            table_name = "trigger_ticks"
            indexes = ((("key", "tick"), True),)

    class Host(Base):
        name = pw.TextField(primary_key=True)
        info = JSONText()
        heartbeat_at = pw.DoubleField()

        class Meta:
            table_name = "hosts"

    class FlowLimit(Base):
        """The rate state of one key of a throttle or rate limit (GCRA: the theoretical
        arrival time of the next start), shared by every scheduler."""

        agent = pw.TextField()
        control = pw.TextField()
        key = pw.TextField()
        tat = pw.DoubleField()

        class Meta:
            table_name = "flow_limits"
            primary_key = pw.CompositeKey("agent", "control", "key")

    class FlowMessage(Base):
        """A trigger handed to an active run (singleton ``interrupt``) that the scheduler
        running it has not delivered yet."""

        id = pw.BigAutoField()
        run_id = pw.TextField(index=True)
        host = pw.TextField(null=True)
        text = pw.TextField()
        created_at = pw.DoubleField()

        class Meta:
            table_name = "flow_messages"

    class Spend(Base):
        """What an agent's model calls cost per day (the project's time zone): budgets."""

        agent = pw.TextField()
        day = pw.TextField()  # YYYY-MM-DD
        usd = pw.DoubleField(default=0)
        tokens = pw.BigIntegerField(default=0)
        unpriced = pw.IntegerField(default=0)  # calls of unknown price

        class Meta:
            table_name = "spend"
            primary_key = pw.CompositeKey("agent", "day")

    class MetaKV(Base):
        key = pw.TextField(primary_key=True)
        value = pw.TextField()

        class Meta:
            table_name = "meta"

    tables = [
        WorkItem, Run, RunEvent, StatusMessage, Call, Lock, LockWait, AgentState, AgentEvent,
        Paused, TriggerTick, Host, FlowLimit, FlowMessage, Spend, MetaKV,
    ]  # fmt: skip
    return SimpleNamespace(tables=tables, **{model.__name__: model for model in tables})


class Tables:
    """A plugin's models bound to one store's database (``store.tables(name)``), by class name:
    ``tables.Delivery``. Write them inside ``store.atomic()``, read them inside
    ``store.guard()``, so a database failure is one ``StoreError`` like core's."""

    def __init__(self, table_set: TableSet, models: Sequence[type[pw.Model]]) -> None:
        self.name = table_set.name
        self.version = table_set.version
        self.prune = table_set.prune
        self.models = tuple(models)
        self._by_name = {model.__name__: model for model in self.models}

    def __getattr__(self, name: str) -> type[pw.Model]:
        try:
            return self.__dict__["_by_name"][name]
        except KeyError:
            have = ", ".join(self.__dict__.get("_by_name", ())) or "none"
            raise AttributeError(
                f"tables {self.__dict__.get('name')!r} have no model {name!r} (models: {have})"
            ) from None


def _bind(table_set: TableSet, db: pw.Database, taken: set[str]) -> Tables:
    """The table set's models defined on ``db``; ValueError when they are not models of ``db``
    or a table name is ``taken`` (core's, or another plugin's)."""
    models = list(table_set.define(db))
    for model in models:
        if not (isinstance(model, type) and issubclass(model, pw.Model)):
            raise ValueError(f"define() returned {model!r}, not a peewee Model class")
        if model._meta.database is not db:
            raise ValueError(
                f"model {model.__name__} is not bound to the database given to define()"
            )
        if model._meta.table_name in taken:
            raise ValueError(f"table {model._meta.table_name!r} belongs to core or another plugin")
    if not models:
        raise ValueError("define() returned no models")
    return Tables(table_set, models)


class Schema(Connection):
    """Creating and migrating core's tables and plugins' table sets; ``tables(name)``."""

    # A table set's name -> its bound models, or why they are unavailable.
    _table_sets: dict[str, Tables | str]

    def tables(self, name: str) -> Tables:
        """The models of the table set a plugin registered as ``name``, bound to this store's
        database; StoreError when no plugin registered it or it could not be opened."""
        found = self._table_sets.get(name)
        if isinstance(found, Tables):
            return found
        if found is None:
            raise StoreError(
                f"database {self._where} has no tables registered as {name!r} "
                "(is the plugin that registers them installed?)"
            )
        raise StoreError(f"database {self._where}: the tables of {name!r} are unavailable: {found}")

    @guarded
    def check_writable(self) -> None:
        """Raise ``StoreError`` now if the database cannot be written (a read-only file or
        directory, locked past the busy timeout), rather than at the first real write."""
        with self._write():  # a row rewritten unchanged: SQLite refuses only an actual write
            sql = self._statement(
                ("check_writable",), lambda: 'UPDATE meta SET "value" = "value" WHERE "key" = ?'
            )
            self._exec(sql, (STAMP,))

    def _schema_version(self, key: str = STAMP) -> int:
        """The stamped version; for core's own, 1 for a database from before versioning; 0
        when there is none."""
        MetaKV = self._m.MetaKV
        if MetaKV.table_exists():
            row = MetaKV.get_or_none(MetaKV.key == key)
            if row is not None:
                return int(row.value)
        return 1 if key == STAMP and self._m.WorkItem.table_exists() else 0

    def _migrate(self, table_sets: Iterable[TableSet]) -> None:
        """Bring core's tables, then each table set's, to their current versions."""
        try:
            if self._schema_version() != migrations.SCHEMA_VERSION:
                with self._write():
                    self._pg_lock(PG_SCHEMA)
                    self._upgrade_core()
            stamps = dict(self._exec('SELECT "key", "value" FROM meta').fetchall())
        except StoreError:
            raise
        except DATABASE_ERRORS as exc:
            raise StoreError(explain(self._where, self._timeout, exc)) from exc
        taken = {model._meta.table_name for model in self._m.tables}
        for table_set in table_sets:
            self._table_sets[table_set.name] = self._open_table_set(table_set, taken, stamps)

    def _upgrade_core(self) -> None:
        have = self._schema_version()  # again, under the lock: another process may have done it
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
        self._upsert(self._m.MetaKV, key=STAMP, value=str(migrations.SCHEMA_VERSION))

    def _open_table_set(
        self, table_set: TableSet, taken: set[str], stamps: dict[str, str]
    ) -> Tables | str:
        """Bound and up to date, or why not (logged once as a warning)."""
        key = f"{STAMP}:{table_set.name}"
        try:
            tables = _bind(table_set, self._db, taken)
            if stamps.get(key) != str(table_set.version):
                with self._write():
                    self._pg_lock(PG_SCHEMA)
                    self._upgrade_table_set(table_set, tables, key)
        except Exception as exc:  # a plugin's tables must not keep the store from opening
            reason = self._reason(exc)
            log.warning("tables %r left out: %s", table_set.name, reason)
            return reason
        taken.update(model._meta.table_name for model in tables.models)
        return tables

    def _upgrade_table_set(self, table_set: TableSet, tables: Tables, key: str) -> None:
        """Create a table set's tables (a new set adopts an existing table of the same name, as
        the webhooks plugin took over core's ``deliveries``) or run its steps above the stamp."""
        have = self._schema_version(key)
        if have == table_set.version:
            return
        if have > table_set.version:
            raise StoreError(
                f"database {self._where} has tables {table_set.name!r} at version {have}, "
                f"newer than the plugin that registers them knows ({table_set.version}): "
                "upgrade that plugin"
            )
        if not have and any(model.table_exists() for model in tables.models):
            have = 1  # adopted (core made it before a plugin owned it): the set's first version
        if have:
            migrations.upgrade(self._db, tables, have, table_set.migrations)
        self._db.create_tables(list(tables.models), safe=True)
        self._upsert(self._m.MetaKV, key=key, value=str(table_set.version))

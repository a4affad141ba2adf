"""Schema versions of the store, so a newer llamaherd opens an older ``.al/`` without loss.

A fresh database gets the current schema at once (``Store`` creates every table) and is stamped
``SCHEMA_VERSION``. An older one is brought forward by running, in order, every step whose
version is above the stamped one, all in the same transaction as the new stamp. A step must keep
every row, use only peewee's portable schema operations (SQLite and PostgreSQL alike), and be safe
to meet a table or column that already exists (or one already gone).

A step sees the models of the current schema; a table the current schema no longer has is
described by a frozen model here (``_cron_ticks``), so old steps keep working as models change.

To change the schema: change the models in ``llamaherd.store.schema``, append a step here that
does the same to an existing database, and add the old schema to the migration test's fixtures
(``tests/store/data``, SQLite and PostgreSQL). Plugins' tables have their own versions and steps
(``TableSet.migrations``), run by the same ``upgrade``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import peewee as pw
from playhouse.migrate import SchemaMigrator, migrate

Step = Callable[[pw.Database, Any], None]


def _add_column(db: pw.Database, model: type[pw.Model], name: str) -> None:
    table = model._meta.table_name
    if name not in {column.name for column in db.get_columns(table)}:
        migrate(SchemaMigrator.from_database(db).add_column(table, name, model._meta.fields[name]))


def _cron_ticks(db: pw.Database) -> type[pw.Model]:
    """The ``cron_ticks`` table of versions 2 and 3 (version 4 made it ``trigger_ticks``)."""

    class CronTick(pw.Model):
        agent = pw.TextField()
        tick = pw.DoubleField()
        claimed_at = pw.DoubleField()

        class Meta:
            database = db
            table_name = "cron_ticks"
            indexes = ((("agent", "tick"), True),)

    return CronTick


def _v2_scale_out(db: pw.Database, models: Any) -> None:
    """Several schedulers on one database: host heartbeats, cron ticks claimed once, run owners."""
    db.create_tables([models.Host, _cron_ticks(db)], safe=True)
    _add_column(db, models.Run, "host")


def _v3_trigger_keys(db: pw.Database, models: Any) -> None:
    """Ticks are claimed per trigger type (``TriggerContext.emit_once``): cron's rows, keyed by
    agent until now, get the ``cron:`` prefix its keys have from here on."""
    ticks = _cron_ticks(db)
    if ticks.table_exists():
        prefixed = pw.Value("cron:").concat(ticks.agent)
        ticks.update(agent=prefixed).where(~ticks.agent.startswith("cron:")).execute()


def _v4_trigger_ticks(db: pw.Database, models: Any) -> None:
    """The ticks table is core's, for every trigger type: ``cron_ticks`` becomes
    ``trigger_ticks``, its ``agent`` column ``key``; every row is copied in claim order (new ids,
    so PostgreSQL's sequence stays right). ``deliveries`` is left as it is: the webhooks plugin's
    tables adopt it when that plugin opens the store."""
    old = _cron_ticks(db)
    if not old.table_exists():
        return
    new = models.TriggerTick
    db.create_tables([new], safe=True)
    rows = old.select(old.agent, old.tick, old.claimed_at).order_by(old.id)
    new.insert_from(
        rows, [new.key, new.tick, new.claimed_at]
    ).on_conflict_ignore().as_rowcount().execute()
    db.drop_tables([old])


def _v5_flow_control(db: pw.Database, models: Any) -> None:
    """Flow control and budgets: the items' and runs' flow columns, the rate state of keys,
    messages for active runs, the spend ledger."""
    for name in ("flow_key", "priority", "not_before", "flow"):
        _add_column(db, models.WorkItem, name)
    _add_column(db, models.Run, "flow_key")
    db.create_tables([models.FlowLimit, models.FlowMessage, models.Spend], safe=True)


# (version reached, step) in order; version 1 is the first released schema.
MIGRATIONS: list[tuple[int, Step]] = [
    (2, _v2_scale_out),
    (3, _v3_trigger_keys),
    (4, _v4_trigger_ticks),
    (5, _v5_flow_control),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def upgrade(
    db: pw.Database, models: Any, have: int, steps: Sequence[tuple[int, Step]] = MIGRATIONS
) -> None:
    """Run every step above version ``have`` (inside the caller's transaction)."""
    for version, step in steps:
        if version > have:
            step(db, models)

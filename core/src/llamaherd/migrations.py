"""Schema versions of the store, so a newer llamaherd opens an older ``.al/`` without loss.

A fresh database gets the current schema at once (``Store`` creates every table) and is stamped
``SCHEMA_VERSION``. An older one is brought forward by running, in order, every step whose
version is above the stamped one, all in the same transaction as the new stamp. A step must keep
every row, use only peewee's portable schema operations (SQLite and PostgreSQL alike), and be safe
to meet a table or column that already exists.

To change the schema: change the models in ``llamaherd.store``, append a step here that does the
same to an existing database, and add the old schema to the migration test's fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import peewee as pw
from playhouse.migrate import SchemaMigrator, migrate


def _add_column(db: pw.Database, model: type[pw.Model], name: str) -> None:
    table = model._meta.table_name
    if name not in {column.name for column in db.get_columns(table)}:
        migrate(SchemaMigrator.from_database(db).add_column(table, name, model._meta.fields[name]))


def _v2_scale_out(db: pw.Database, models: Any) -> None:
    """Several schedulers on one database: host heartbeats, cron ticks claimed once, run owners."""
    db.create_tables([models.Host, models.CronTick], safe=True)
    _add_column(db, models.Run, "host")


def _v3_trigger_ticks(db: pw.Database, models: Any) -> None:
    """Ticks are claimed per trigger type (``TriggerContext.emit_once``): cron's rows, keyed by
    agent until now, get the ``cron:`` prefix its keys have from here on."""
    ticks = models.CronTick
    prefixed = pw.Value("cron:").concat(ticks.agent)
    ticks.update(agent=prefixed).where(~ticks.agent.startswith("cron:")).execute()


# (version reached, step) in order; version 1 is the first released schema.
MIGRATIONS: list[tuple[int, Callable[[pw.Database, Any], None]]] = [
    (2, _v2_scale_out),
    (3, _v3_trigger_ticks),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def upgrade(db: pw.Database, models: Any, have: int) -> None:
    """Run every step above version ``have`` (inside the caller's transaction)."""
    for version, step in MIGRATIONS:
        if version > have:
            step(db, models)

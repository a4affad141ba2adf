"""Delivery receipts: this plugin's own table in the store (``register_tables``).

Every request to ``/webhooks/<source>`` leaves one receipt: its source, delivery id, headers
(those that may hold a secret left out), body, the status it was answered with, what became of
it and the agents it matched. A receipt answered with status >= 400 is a dead letter. A repeated
delivery id of one source is recognised by the unique ``(source, delivery_id)`` index; for the
sources whose bodies are unique per event (``dedupe_bodies``), an accepted delivery also keeps
the digest of its verified body, so the same body under a new delivery id is recognised too.

Dead letters are bounded, since anyone can make one: each source keeps its newest
``MAX_DEAD_LETTERS``, none older than ``DEAD_LETTER_DAYS`` (trimmed every ``TRIM_EVERY``
dead letters recorded), and ``Ingest`` stores only a cut of a rejected request.

The table is ``deliveries``, the name it had when core kept it: a database that has it is
adopted with its rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import peewee as pw

from llamaherd.api import JSONText, Store, Tables, TableSet

NAME = "webhooks"
MAX_DEAD_LETTERS = 1000  # per source
DEAD_LETTER_DAYS = 3
TRIM_EVERY = 50  # dead letters recorded (in this process) between two trims
_dead_letters_recorded = itertools.count(1)


def define(db: pw.Database) -> Sequence[type[pw.Model]]:
    class Delivery(pw.Model):
        source = pw.TextField()
        delivery_id = pw.TextField(null=True)
        at = pw.DoubleField(index=True)
        headers = JSONText()
        body = pw.BlobField()
        status = pw.IntegerField()
        result = pw.TextField()
        matched = JSONText()
        body_digest = pw.TextField(null=True)  # sha256 of a verified body (dedupe_bodies)
        # The event as the source parsed it (a generic sender's may be in the body): None for
        # a dead letter, which is never parsed.
        event = pw.TextField(null=True)
        # 1 while a delivery taken before its scheduler's agents were ready waits to be
        # routed (``Ingest.route_pending``); NULL once routed, and for every other receipt.
        pending = pw.IntegerField(null=True)

        class Meta:
            database = db
            table_name = "deliveries"
            indexes = ((("source", "delivery_id"), True), (("source", "body_digest"), False))

    # Partial: a receipt routed at once (nearly all of them) costs no index write.
    Delivery.add_index(Delivery.index(Delivery.pending, where=Delivery.pending.is_null(False)))
    return [Delivery]


def _v2_body_digest(db: pw.Database, tables: Tables) -> None:
    """Receipts keep the digest of a verified body (replays under a new delivery id)."""
    _add_column(db, "body_digest", tables.Delivery.body_digest)
    tables.Delivery._schema.create_indexes(safe=True)


def _v3_event(db: pw.Database, tables: Tables) -> None:
    """Receipts keep the event their source parsed (listings showed only a header's)."""
    _add_column(db, "event", tables.Delivery.event)


def _v4_pending(db: pw.Database, tables: Tables) -> None:
    """Deliveries taken while the agents loaded wait, routed once they are ready."""
    _add_column(db, "pending", tables.Delivery.pending)
    tables.Delivery._schema.create_indexes(safe=True)


def _add_column(db: pw.Database, name: str, field: pw.Field) -> None:
    from playhouse.migrate import SchemaMigrator, migrate

    if name not in {column.name for column in db.get_columns("deliveries")}:
        migrate(SchemaMigrator.from_database(db).add_column("deliveries", name, field))


def prune(tables: Tables, cutoff: float) -> int:
    """Receipts older than ``cutoff`` go with the rest of the history."""
    return tables.Delivery.delete().where(tables.Delivery.at < cutoff).execute()


TABLES = TableSet(
    name=NAME,
    version=4,
    define=define,
    migrations=[(2, _v2_body_digest), (3, _v3_event), (4, _v4_pending)],
    prune=prune,
    description="Receipts of webhook deliveries, dead letters included.",
)


# The two statements every delivery runs, written once: peewee's query builder costs more than
# the statement itself (portable SQL; ``?`` becomes the backend's placeholder).
_SEEN = "SELECT 1 FROM deliveries WHERE source = ? AND delivery_id = ? LIMIT 1"
_SEEN_BODY = "SELECT 1 FROM deliveries WHERE source = ? AND body_digest = ? LIMIT 1"
_RECORD = (
    'INSERT INTO deliveries (source, delivery_id, "at", headers, body, status, result, matched, '
    "body_digest, event, pending) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_PENDING = "SELECT id FROM deliveries WHERE pending IS NOT NULL ORDER BY id"
# Taken by one router: the row's lock (PostgreSQL) or the write transaction (SQLite) makes a
# second one find it routed.
_TAKE = "UPDATE deliveries SET pending = NULL WHERE id = ? AND pending IS NOT NULL"
_SETTLE = "UPDATE deliveries SET result = ?, matched = ? WHERE id = ?"
# A source's dead letters beyond its newest MAX_DEAD_LETTERS, or older than the cutoff.
_TRIM = (
    'DELETE FROM deliveries WHERE source = ? AND status >= 400 AND ("at" < ? OR id <= '
    "(SELECT id FROM deliveries WHERE source = ? AND status >= 400 "
    "ORDER BY id DESC LIMIT 1 OFFSET ?))"
)


class Receipts:
    """The delivery receipts of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _model(self) -> Any:
        return self.store.tables(NAME).Delivery

    def _run(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self.store.execute(sql, params)  # the store's prepared path

    def record(
        self,
        source: str,
        delivery_id: str | None,
        headers: dict[str, str],
        body: bytes,
        status: int,
        result: str,
        matched: list[str],
        body_digest: str | None = None,
        event: str | None = None,
        pending: bool = False,
    ) -> bool:
        """Keep a receipt (``pending``: of a delivery to route once the agents are ready);
        False when (source, delivery_id) was already recorded."""
        Delivery = self._model()
        params = (
            source, delivery_id, self.store.clock(), Delivery.headers.db_value(headers),
            Delivery.body.db_value(bytes(body)), status, result,
            Delivery.matched.db_value(list(matched)), body_digest, event, 1 if pending else None,
        )  # fmt: skip
        recorded = self.store.write(self._inserted, params)
        if status >= 400 and next(_dead_letters_recorded) % TRIM_EVERY == 0:
            self.trim(source)
        return recorded

    def _inserted(self, params: tuple[Any, ...]) -> bool:
        return self._run(_RECORD, params).rowcount == 1

    def trim(self, source: str) -> int:
        """Drop ``source``'s dead letters beyond the newest ``MAX_DEAD_LETTERS`` and those
        older than ``DEAD_LETTER_DAYS``; how many went."""
        cutoff = self.store.clock() - DEAD_LETTER_DAYS * 86400
        with self.store.atomic():
            params = (source, cutoff, source, MAX_DEAD_LETTERS)
            return self._run(_TRIM, params).rowcount

    def seen(self, source: str, delivery_id: str) -> bool:
        """Whether ``source`` already delivered ``delivery_id``."""
        with self.store.guard():
            return self._run(_SEEN, (source, delivery_id)).fetchone() is not None

    def seen_body(self, source: str, digest: str) -> bool:
        """Whether ``source`` already delivered a verified body of this digest."""
        with self.store.guard():
            return self._run(_SEEN_BODY, (source, digest)).fetchone() is not None

    def pending(self) -> list[int]:
        """The ids of the receipts of deliveries waiting to be routed, oldest first."""
        with self.store.guard():
            return [row[0] for row in self._run(_PENDING, ())]

    def take(self, receipt_id: int) -> bool:
        """Mark a waiting delivery as routed, in the caller's write transaction; False when
        it was not waiting (routed meanwhile, by another scheduler too)."""
        return self._run(_TAKE, (receipt_id,)).rowcount == 1

    def settle(self, receipt_id: int, result: str, matched: list[str]) -> None:
        """What became of a delivery routed after it was taken (``take``)."""
        Delivery = self._model()
        params = (result, Delivery.matched.db_value(list(matched)), receipt_id)
        self._run(_SETTLE, params)

    def recent(
        self, limit: int = 50, dead_letters: bool = False, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Receipts, newest first: {id, source, delivery_id, at, event, headers, body (bytes),
        status, result, matched}; ``dead_letters`` keeps only those answered with status >=
        400."""
        Delivery = self._model()
        query = Delivery.select().order_by(Delivery.id.desc()).limit(limit).offset(offset)
        if dead_letters:
            query = query.where(Delivery.status >= 400)
        with self.store.guard():
            return [_receipt(d) for d in query]

    def get(self, receipt_id: int) -> dict[str, Any] | None:
        """One receipt by its id (as ``recent`` shows it), or None."""
        Delivery = self._model()
        with self.store.guard():
            found = Delivery.get_or_none(Delivery.id == receipt_id)
        return None if found is None else _receipt(found)


_FIELDS = ("id", "source", "delivery_id", "at", "event", "headers", "status", "result", "matched")


def _receipt(row: Any) -> dict[str, Any]:
    return {**{name: getattr(row, name) for name in _FIELDS}, "body": bytes(row.body)}

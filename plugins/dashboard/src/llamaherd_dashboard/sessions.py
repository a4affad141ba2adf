"""Signed-in browser sessions, kept server-side so signing out ends one for good.

The ``al_auth`` cookie proves a sign-in by an HMAC, but a cookie copied before its owner signed
out would prove it still: so each sign-in is also a row of this plugin's table (``dashboard``:
the SHA-256 of the session id and when it expires), signing out deletes it, and a session
counts as signed in only while its row is there. A row seen is trusted for ``CACHE_SECONDS``,
so a page's live stream does not ask the database on every look; another scheduler host
sharing the database sees a sign-out within that time.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import peewee as pw

from llamaherd.api import Store, Tables, TableSet

NAME = "dashboard"
CACHE_SECONDS = 2.0
MAX_CACHED = 10_000


def define(db: pw.Database) -> Sequence[type[pw.Model]]:
    class DashboardSession(pw.Model):
        digest = pw.TextField(primary_key=True)  # sha256 of the session id, never the id
        expires_at = pw.DoubleField(index=True)

        class Meta:
            database = db
            table_name = "dashboard_sessions"

    return [DashboardSession]


def prune(tables: Tables, cutoff: float) -> int:
    """Sessions that expired before ``cutoff`` (a sign-in lasts a week, history longer)."""
    model = tables.DashboardSession
    return model.delete().where(model.expires_at < cutoff).execute()


TABLES = TableSet(
    name=NAME,
    version=1,
    define=define,
    prune=prune,
    description="Signed-in dashboard sessions (so signing out ends one server-side).",
)


def _digest(session: str) -> str:
    return hashlib.sha256(session.encode()).hexdigest()


class Sessions:
    """The signed-in sessions of one store."""

    def __init__(self, store: Store):
        self.store = store
        self._seen: dict[str, float] = {}  # digest -> when its row was last seen
        self._lock = threading.Lock()

    def _model(self) -> Any:
        return self.store.tables(NAME).DashboardSession

    def open(self, session: str, expires_at: float) -> None:
        model = self._model()
        with self.store.atomic():
            model.insert(digest=_digest(session), expires_at=expires_at).on_conflict(
                conflict_target=[model.digest], update={model.expires_at: expires_at}
            ).execute()

    def close(self, session: str) -> None:
        digest = _digest(session)
        with self._lock:
            self._seen.pop(digest, None)
        model = self._model()
        with self.store.atomic():
            model.delete().where(model.digest == digest).execute()

    def is_open(self, session: str) -> bool:
        digest = _digest(session)
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(digest)
        if seen is not None and now - seen < CACHE_SECONDS:
            return True
        model = self._model()
        with self.store.guard():
            found = model.get_or_none(model.digest == digest)
        if found is None or found.expires_at < time.time():
            return False
        with self._lock:
            if len(self._seen) >= MAX_CACHED:
                self._seen.clear()
            self._seen[digest] = now
        return True

"""Delivery receipts live in the plugin's own table set: recorded once, dead letters, pruned with
the rest of the history, and adopted with their rows from a database where core kept them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from llamaherd_webhooks.receipts import TABLES, Receipts

from llamaherd.store import Store, StoreError

NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(database_url: str, clock: Clock) -> Iterator[Store]:
    opened = Store.open(database_url, clock=clock, tables=[TABLES])
    yield opened
    opened.close()


def test_receipts_recorded_once_and_dead_letters(store: Store) -> None:
    receipts = Receipts(store)
    assert receipts.record("github", "d1", {"X-GitHub-Event": "push"}, b"{}", 202, "queued", ["a"])
    assert not receipts.record("github", "d1", {}, b"{}", 202, "queued", ["a"])
    assert receipts.record("gitlab", "d1", {}, b"\x00\xff", 401, "bad signature", [])
    assert receipts.record("github", None, {}, b"", 202, "no match", [])
    assert receipts.record("github", None, {}, b"", 202, "no match", [])
    assert receipts.seen("github", "d1") and not receipts.seen("github", "d2")
    assert len(receipts.recent()) == 4
    (dead,) = receipts.recent(dead_letters=True)
    assert dead["body"] == b"\x00\xff" and dead["status"] == 401 and dead["at"] == NOW
    assert receipts.recent()[-1]["headers"] == {"X-GitHub-Event": "push"}
    # The event as the source parsed it (issue 42 item 18); a dead letter has none.
    assert receipts.record("hooks", "d3", {}, b"{}", 202, "matched", ["a"], event="deploy")
    assert [r["event"] for r in receipts.recent()] == ["deploy", None, None, None, None]


def test_prune_removes_old_receipts_only(store: Store, clock: Clock) -> None:
    receipts = Receipts(store)
    receipts.record("github", "old", {}, b"", 202, "queued", ["alpha"])
    clock.now += 20 * 86400
    receipts.record("github", "new", {}, b"", 202, "queued", ["alpha"])
    assert store.prune(14) >= 1
    assert [r["delivery_id"] for r in receipts.recent()] == ["new"]


def test_receipts_core_kept_are_adopted_with_their_rows(tmp_path: Path) -> None:
    """A database from before plugins owned tables has ``deliveries`` as core created it."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE "deliveries" ("id" INTEGER NOT NULL PRIMARY KEY, "source" TEXT NOT NULL,
              "delivery_id" TEXT, "at" REAL NOT NULL, "headers" TEXT NOT NULL,
              "body" BLOB NOT NULL, "status" INTEGER NOT NULL, "result" TEXT NOT NULL,
              "matched" TEXT NOT NULL);
            CREATE INDEX "deliveries_at" ON "deliveries" ("at");
            CREATE UNIQUE INDEX "deliveries_source_delivery_id"
              ON "deliveries" ("source", "delivery_id");
            INSERT INTO deliveries (source, delivery_id, "at", headers, body, status, result,
                                    matched)
              VALUES ('github', 'kept', 5.0, '{}', x'7b7d', 202, 'matched', '["alpha"]');
            """
        )
    store = Store.open(f"sqlite:///{path}", tables=[TABLES])
    receipts = Receipts(store)
    assert receipts.seen("github", "kept")
    assert not receipts.record("github", "kept", {}, b"", 202, "again", [])
    [kept] = receipts.recent()
    assert kept["body"] == b"{}" and kept["matched"] == ["alpha"] and kept["event"] is None
    assert receipts.record("github", "new", {}, b"", 202, "matched", [], event="push")
    assert receipts.recent()[0]["event"] == "push"


def test_a_store_opened_without_the_table_set_says_so(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path}/db.db", tables=[])
    with pytest.raises(StoreError, match="no tables registered as 'webhooks'"):
        Receipts(store).recent()

"""Schema versions: an older database is brought forward without losing a row, on SQLite and on
PostgreSQL; the migrated schema is exactly a fresh one."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llamaherd.store import Store, migrations
from llamaherd.testing import postgres_schema, require_service

from .conftest import PG_URL

DATA = Path(__file__).with_name("data")

# Rows in every table of version 1, in SQL both backends take.
V1_ROWS = """
INSERT INTO work_items (agent, kind, payload, prompt, rerun_count, created_at, state)
  VALUES ('alpha', 'webhook', '{"n": 1}', 'an event', 0, 10.0, 'queued');
INSERT INTO runs (id, agent, state, trigger_kind, created_at, started_at, call_depth,
                  rerun_count, rerun_requested, input_tokens, output_tokens, trigger)
  VALUES ('alpha-0000abcd', 'alpha', 'waiting', 'manual', 5.0, 5.0, 0, 0, FALSE, 7, 3,
          '{"kind": "manual", "payload": {}}');
INSERT INTO run_events (run_id, "at", "type", data)
  VALUES ('alpha-0000abcd', 5.0, 'state', '{"to": "running"}');
INSERT INTO status_messages (run_id, "at", "text") VALUES ('alpha-0000abcd', 5.0, 'working');
INSERT INTO calls (caller_run, target, context, depth, state, created_at)
  VALUES ('alpha-0000abcd', 'beta', 'review this', 1, 'pending', 5.0);
INSERT INTO locks (uri, run_id, acquired_at, expires_at)
  VALUES ('res://1', 'alpha-0000abcd', 5.0, 9e18);
INSERT INTO lock_waits (run_id, uri, since) VALUES ('beta-0000abcd', 'res://1', 5.0);
INSERT INTO agent_states (agent, state, cause, updated_at)
  VALUES ('alpha', 'hibernate', 'owner', 5.0);
INSERT INTO agent_events (agent, "at", "type", data) VALUES ('alpha', 5.0, 'state', '{}');
INSERT INTO paused ("name", "at") VALUES ('beta', 5.0);
INSERT INTO deliveries (source, delivery_id, "at", headers, body, status, result, matched)
  VALUES ('github', 'd-1', 5.0, '{}', '{}', 202, 'matched', '["alpha"]');
"""
# Version 2 added hosts and cron_ticks, whose keys were bare agent names until version 3.
V2_ROWS = """
INSERT INTO hosts ("name", info, heartbeat_at) VALUES ('h1', '{"pid": 1}', 5.0);
INSERT INTO cron_ticks (agent, tick, claimed_at)
  VALUES ('alpha', 60.0, 61.0), ('beta', 60.0, 62.0), ('alpha', 120.0, 121.0);
"""
# Version 4: deliveries belong to the webhooks plugin, ticks of every trigger type are core's.
V4_ROWS = (
    V1_ROWS[: V1_ROWS.index("INSERT INTO deliveries")]
    + """
INSERT INTO hosts ("name", info, heartbeat_at) VALUES ('h1', '{"pid": 1}', 5.0);
INSERT INTO trigger_ticks ("key", tick, claimed_at)
  VALUES ('cron:alpha', 60.0, 61.0), ('cron:beta', 60.0, 62.0);
"""
)


class Database:
    """A throwaway database reached both through raw SQL and through ``Store.open``."""

    def __init__(self, backend: str, url: str, raw: Any) -> None:
        self.backend, self.url, self.raw = backend, url, raw

    def script(self, sql: str) -> None:
        if self.backend == "sqlite":
            self.raw.executescript(sql)
        else:
            self.raw.cursor().execute(sql)

    def rows(self, sql: str) -> list[tuple]:
        cursor = self.raw.cursor()
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        if self.backend == "sqlite":
            query = "SELECT name FROM sqlite_master WHERE type = 'table'"
        else:
            query = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        tables = sorted(name for (name,) in self.rows(query))
        return {table: self.rows(f'SELECT COUNT(*) FROM "{table}"')[0][0] for table in tables}

    def load(self, version: int) -> None:
        """The frozen schema of ``version`` with rows in every table."""
        suffix = "" if self.backend == "sqlite" else ".postgres"
        self.script((DATA / f"schema_v{version}{suffix}.sql").read_text())
        if version >= 4:
            self.script(V4_ROWS)
            return
        self.script(V1_ROWS + (V2_ROWS if version >= 2 else ""))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        require_service("postgres")
    return request.param


def _database(backend: str, where: Path) -> Iterator[Database]:
    if backend == "sqlite":
        raw = sqlite3.connect(where, isolation_level=None)
        yield Database(backend, f"sqlite:///{where}", raw)
        raw.close()
        return
    import psycopg2

    with postgres_schema(PG_URL or "") as (_, url):
        raw = psycopg2.connect(url)
        raw.autocommit = True
        yield Database(backend, url, raw)
        raw.close()


@pytest.fixture
def old(backend: str, tmp_path: Path) -> Iterator[Database]:
    yield from _database(backend, tmp_path / "old.db")


@pytest.fixture
def fresh(backend: str, tmp_path: Path) -> Iterator[Database]:
    yield from _database(backend, tmp_path / "fresh.db")


def layout(store: Store) -> dict[str, Any]:
    """Columns and indexes of core's tables."""
    db = store._db
    return {
        table: (
            sorted((c.name, c.data_type, c.null, c.primary_key) for c in db.get_columns(table)),
            sorted((i.name, tuple(i.columns), i.unique) for i in db.get_indexes(table)),
        )
        for table in sorted(model._meta.table_name for model in store._m.tables)
    }


@pytest.mark.parametrize("version", [1, 2, 4])
def test_an_old_database_keeps_every_row(old: Database, fresh: Database, version: int) -> None:
    old.load(version)
    before = old.counts()
    store = Store.open(old.url, tables=[])
    assert store._schema_version() == migrations.SCHEMA_VERSION
    after = old.counts()
    ticks = before.pop("cron_ticks", 0) + before.pop("trigger_ticks", 0)
    assert "cron_ticks" not in after and after.pop("trigger_ticks") == ticks
    added = {table: after.pop(table) for table in set(after) - set(before) - {"hosts"}}
    assert added == dict.fromkeys(added, 0), "the tables a later version added start empty"
    assert {table: n for table, n in after.items() if table != "hosts"} == {
        table: n for table, n in before.items() if table != "hosts"
    }, "every row of every table is kept (deliveries too, for the webhooks plugin to adopt)"
    assert after.get("hosts", 0) == before.get("hosts", 0)
    # The migrated schema is exactly a fresh one.
    assert layout(store) == layout(Store.open(fresh.url, tables=[]))
    store.close()


def test_cron_ticks_become_trigger_ticks_of_the_cron_type(old: Database) -> None:
    old.load(2)
    store = Store.open(old.url, tables=[])
    rows = old.rows('SELECT "key", tick, claimed_at FROM trigger_ticks ORDER BY id')
    assert rows == [
        ("cron:alpha", 60.0, 61.0),
        ("cron:beta", 60.0, 62.0),
        ("cron:alpha", 120.0, 121.0),
    ]
    assert store.last_tick("cron:alpha") == 120.0
    assert not store.claim_tick("cron:alpha", 120.0), "a migrated tick is still claimed once"
    assert store.claim_tick("cron:alpha", 180.0) and store.last_tick("cron:alpha") == 180.0
    store.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_migrated_database_works(old: Database, version: int) -> None:
    old.load(version)
    store = Store.open(old.url, tables=[])
    run = store.get_run("alpha-0000abcd")
    assert run.state == "waiting" and run.host is None and run.input_tokens == 7
    assert store.events(run.id)[0]["data"] == {"to": "running"}
    assert store.status_messages(run.id)[0]["text"] == "working"
    assert store.locks()[0]["holder"] == run.id
    assert store.agent_state("alpha") == "hibernate" and store.paused() == (False, {"beta"})
    item, new_run = store.claim({"alpha": 1}, None, "h")
    assert item.payload == {"n": 1} and new_run.host == "h"
    assert store.claim_tick("cron:alpha", 600.0)
    store.heartbeat_host("h", {})
    assert "h" in [host["host"] for host in store.hosts()]
    store.close()


def test_opening_twice_is_a_no_op(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db.db"
    Store.open(url).enqueue("alpha", "manual", {})
    assert Store.open(url).queue_depth() == {"alpha": 1}


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db.db"
    store = Store.open(url, tables=[])
    store._upsert(store._m.MetaKV, key="schema_version", value="999")
    from llamaherd.store import StoreError

    with pytest.raises(StoreError, match="newer than this llamaherd knows"):
        Store.open(url, tables=[])

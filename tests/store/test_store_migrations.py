"""Schema versions: an older database is brought forward without losing a row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from llamaherd import migrations
from llamaherd.store import Store

V1_SCHEMA = Path(__file__).with_name("data") / "schema_v1.sql"


def make_v1(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA.read_text())
        conn.executescript(
            """
            INSERT INTO work_items (id, agent, kind, payload, prompt, rerun_count, created_at, state)
              VALUES (1, 'alpha', 'webhook', '{"n": 1}', 'an event', 0, 10.0, 'queued');
            INSERT INTO runs (id, agent, state, trigger_kind, created_at, started_at, call_depth,
                              rerun_count, rerun_requested, input_tokens, output_tokens, trigger)
              VALUES ('alpha-0000abcd', 'alpha', 'waiting', 'manual', 5.0, 5.0, 0, 0, 0, 7, 3,
                      '{"kind": "manual", "payload": {}}');
            INSERT INTO run_events (run_id, at, type, data)
              VALUES ('alpha-0000abcd', 5.0, 'state', '{"to": "running"}');
            INSERT INTO locks (uri, run_id, acquired_at, expires_at)
              VALUES ('res://1', 'alpha-0000abcd', 5.0, 9e18);
            INSERT INTO agent_states (agent, state, cause, updated_at)
              VALUES ('alpha', 'hibernate', 'owner', 5.0);
            """
        )


def columns(store: Store) -> dict[str, list[str]]:
    return {
        table: sorted(c.name for c in store._db.get_columns(table))
        for table in sorted(store._db.get_tables())
    }


def test_v1_database_opens_with_data_intact(tmp_path: Path) -> None:
    make_v1(tmp_path / "old.db")
    store = Store.open(f"sqlite:///{tmp_path}/old.db")
    assert store._schema_version() == migrations.SCHEMA_VERSION
    run = store.get_run("alpha-0000abcd")
    assert run.state == "waiting" and run.host is None and run.input_tokens == 7
    assert store.events(run.id)[0]["data"] == {"to": "running"}
    assert store.locks()[0]["holder"] == run.id
    assert store.agent_state("alpha") == "hibernate"
    item, new_run = store.claim({"alpha": 1}, None, "h")
    assert item.payload == {"n": 1} and new_run.host == "h"
    assert store.claim_tick("alpha", 60.0)
    store.heartbeat_host("h", {})
    # The migrated schema is exactly a fresh one.
    assert columns(store) == columns(Store.open(f"sqlite:///{tmp_path}/new.db"))


def test_opening_twice_is_a_no_op(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db.db"
    Store.open(url).enqueue("alpha", "manual", {})
    assert Store.open(url).queue_depth() == {"alpha": 1}

"""A database that cannot be used gives one StoreError line naming it; nothing half written."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from llamaherd.install import install_command
from llamaherd.store import Store, StoreError

# Root ignores file modes; without these capabilities it obeys them like any user.
AS_PLAIN_USER = (
    ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--inh-caps", "-all"]
    if os.geteuid() == 0
    else []
)
OPEN_AND_ENQUEUE = """
import sys
from llamaherd.store import Store, StoreError
try:
    Store.open(sys.argv[1]).enqueue("alpha", "manual", {})
except StoreError as exc:
    print(exc)
    sys.exit(2)
"""


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def open_as_plain_user(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_PLAIN_USER, sys.executable, "-c", OPEN_AND_ENQUEUE, url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_corrupt_file(tmp_path: Path) -> None:
    db = tmp_path / "work-queue.db"
    db.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(StoreError) as err:
        Store.open(sqlite_url(db))
    message = str(err.value)
    assert str(db) in message and "corrupt" in message and "\n" not in message


def test_read_only_file_and_directory(tmp_path: Path) -> None:
    state = tmp_path / ".al"
    Store.open(sqlite_url(state / "work-queue.db")).close()
    for path in state.iterdir():
        path.chmod(0o444)
    state.chmod(0o555)
    try:
        done = open_as_plain_user(sqlite_url(state / "work-queue.db"))
    finally:
        state.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert "cannot be written" in done.stdout and str(state / "work-queue.db") in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert Store.open(sqlite_url(state / "work-queue.db")).queue_depth() == {}


def test_read_only_parent_directory(tmp_path: Path) -> None:
    tmp_path.chmod(0o555)
    try:
        done = open_as_plain_user(sqlite_url(tmp_path / ".al" / "work-queue.db"))
    finally:
        tmp_path.chmod(0o755)
    assert done.returncode == 2 and "cannot be written" in done.stdout, done.stdout + done.stderr


def test_locked_beyond_the_busy_timeout(tmp_path: Path) -> None:
    db = tmp_path / "work-queue.db"
    store = Store.open(f"{sqlite_url(db)}?timeout=0.2")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="is locked") as err:
            store.enqueue("alpha", "manual", {})
        assert str(db) in str(err.value)
    finally:
        holder.execute("ROLLBACK")
    assert store.queue_depth() == {}
    assert store.enqueue("alpha", "manual", {}) is not None


def test_disk_full_leaves_no_half_written_item(tmp_path: Path) -> None:
    store = Store.open(sqlite_url(tmp_path / "work-queue.db"))
    pages = store._db.execute_sql("PRAGMA page_count").fetchone()[0]
    # On the connection that writes (the store's writer thread): this connection only.
    store.write(store._db.execute_sql, f"PRAGMA max_page_count = {pages + 8}")
    committed = 0
    with pytest.raises(StoreError, match="disk is full"):
        for n in range(100):
            store.enqueue("alpha", "webhook", {"blob": "x" * 3000, "n": n}, limit=1000)
            committed += 1
    assert store.queue_depth() == {"alpha": committed}


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "work-queue.db"
    Store.open(sqlite_url(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 999, newer"):
        Store.open(sqlite_url(db))


def test_unreachable_server_hides_the_password() -> None:
    with pytest.raises(StoreError) as err:
        Store.open("postgresql://al:s3cret-pw@127.0.0.1:1/al?connect_timeout=2")
    assert "s3cret-pw" not in str(err.value) and "127.0.0.1:1" in str(err.value)


def test_memory_and_unknown_urls_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="needs a file path"):
        Store.open("sqlite:///:memory:")
    with pytest.raises(StoreError, match="only sqlite:// and postgresql://"):
        Store.open("mysql://root@127.0.0.1/al")


def test_relative_sqlite_paths_are_under_root(tmp_path: Path) -> None:
    Store.open("sqlite:///.al/work-queue.db", str(tmp_path)).enqueue("alpha", "manual", {})
    assert (tmp_path / ".al" / "work-queue.db").is_file()


@pytest.mark.postgres
def test_a_dropped_server_connection_is_replaced(pg_schema: tuple[str, str]) -> None:
    import psycopg2

    from .conftest import PG_URL, empty_pg_schema

    empty_pg_schema(pg_schema[0])
    store = Store.open(pg_schema[1])
    store.enqueue("alpha", "manual", {})
    pid = store._db.execute_sql("SELECT pg_backend_pid()").fetchone()[0]
    admin = psycopg2.connect(PG_URL)
    admin.autocommit = True
    admin.cursor().execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.close()
    with pytest.raises(StoreError, match="127.0.0.1"):
        store.queue_depth()
    assert store.queue_depth() == {"alpha": 1}


def test_a_missing_postgresql_driver_says_how_to_get_it(tmp_path: Path) -> None:
    # A psycopg2 that cannot be imported, first on the path: as on a host without the driver.
    (tmp_path / "site" / "psycopg2").mkdir(parents=True)
    (tmp_path / "site" / "psycopg2" / "__init__.py").write_text("raise ImportError('absent')\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "config.toml").write_text('database = "postgresql://al@127.0.0.1:9/al"\n')
    done = subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project), "stat"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "error: database postgresql://al@127.0.0.1:9/al: the PostgreSQL driver (psycopg2) is "
        f"not installed; install it with: {install_command('llamaherd', 'postgres')}"
    )

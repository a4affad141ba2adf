"""Fixtures for the store tests: a real database per test, SQLite always, PostgreSQL when
AL_TEST_POSTGRES_URL names a server (``bash .ci/postgres.sh`` starts one and prints its URL)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaherd.store import Store
from llamaherd.testing import postgres_schema, require_service

PG_URL = os.environ.get("AL_TEST_POSTGRES_URL")


class FakeClock:
    """A clock the test moves by hand, so TTLs and deadlines need no sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def pg_schema() -> Iterator[tuple[str, str]]:
    """One schema with the store's tables for the whole session (creating tables is slow)."""
    require_service("postgres")
    with postgres_schema(PG_URL) as (name, url):
        Store.open(url).close()
        yield name, url


def empty_pg_schema(name: str) -> None:
    """Every table but ``meta`` emptied, ids restarted: a fresh database, quickly."""
    import psycopg2

    conn = psycopg2.connect(PG_URL)
    conn.autocommit = True
    cursor = conn.cursor()
    cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (name,))
    tables = ", ".join(f"{name}.{table}" for (table,) in cursor.fetchall() if table != "meta")
    cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY")
    conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL: an SQLite file under tmp_path, or an emptied PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/.al/work-queue.db"
    name, url = request.getfixturevalue("pg_schema")
    empty_pg_schema(name)
    return url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(db_url: str, clock: FakeClock) -> Iterator[Store]:
    opened = Store.open(db_url, clock=clock)
    yield opened
    opened.close()

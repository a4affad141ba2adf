"""Fixtures for scale-out tests: a private PostgreSQL schema per test, which several project
checkouts (one per scheduler host) all name as their ``database``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

PG_URL = os.environ.get("AL_TEST_POSTGRES_URL")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database URL whose search_path is a fresh schema on the test server, dropped after."""
    if not PG_URL:
        pytest.skip("AL_TEST_POSTGRES_URL is not set (bash .ci/postgres.sh starts a server)")
    import psycopg2

    name = "scale_" + uuid.uuid4().hex[:10]
    conn = psycopg2.connect(PG_URL)
    conn.autocommit = True
    conn.cursor().execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{name}"
    finally:
        conn.cursor().execute(f"DROP SCHEMA {name} CASCADE")
        conn.close()

"""Fixtures for scale-out tests: a private PostgreSQL schema per test, which several project
checkouts (one per scheduler host) all name as their ``database``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from llamaherd.testing import postgres_schema, require_service

PG_URL = os.environ.get("AL_TEST_POSTGRES_URL")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database URL whose search_path is a fresh schema on the test server, dropped after."""
    require_service("postgres")
    with postgres_schema(PG_URL, prefix="scale_") as (_, url):
        yield url

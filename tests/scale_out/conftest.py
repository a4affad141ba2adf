"""Fixtures for scale-out tests: a private PostgreSQL schema per test and several project
checkouts (one per scheduler host) that all name it as their ``database``."""

from __future__ import annotations

import importlib.util
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_URL = os.environ.get("AL_TEST_POSTGRES_URL")
ROOT = Path(__file__).resolve().parents[2]


def _scheduler_helpers() -> Any:
    # Project and SchedulerProcess live in the scheduler tests' conftest (not an importable
    # package), so it is loaded by path, as the dashboard tests do.
    path = ROOT / "tests" / "scheduler" / "conftest.py"
    spec = importlib.util.spec_from_file_location("llamaherd_scheduler_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = _scheduler_helpers()
Project = helpers.Project
SchedulerProcess = helpers.SchedulerProcess


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


@pytest.fixture
def schedulers() -> Iterator[list[Any]]:
    """Scheduler processes a test starts (append them); each is stopped afterwards."""
    started: list[Any] = []
    yield started
    for sched in started:
        sched.stop()

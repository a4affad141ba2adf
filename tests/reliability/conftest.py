"""Shared pieces of the reliability suite: the ``slow`` marker, a printed seed, polling.

Every test here is bounded in count and time and uses 127.0.0.1 only. Randomness comes from one
seed (``AL_RELIABILITY_SEED``, default below), printed so a failure can be replayed:
``AL_RELIABILITY_SEED=1234 .venv/bin/pytest tests/reliability -s``.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import wait_until

DEFAULT_SEED = 20261202


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a reliability test taking more than ~20 s")


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The run's seed (``AL_RELIABILITY_SEED``), printed and recorded with the test."""
    value = int(os.environ.get("AL_RELIABILITY_SEED", DEFAULT_SEED))
    print(f"\n[reliability] {request.node.name}: seed={value}")
    request.node.user_properties.append(("seed", value))
    return value


@pytest.fixture
def rng(seed: int) -> random.Random:
    return random.Random(seed)


def read_db(path: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of ``sql`` from the SQLite file at ``path``, read-only (the scheduler may be up)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


@pytest.fixture
def helpers() -> Any:
    """``helpers.wait_until`` and ``helpers.read_db`` (test modules import nothing local)."""

    class Helpers:
        pass

    Helpers.wait_until = staticmethod(wait_until)
    Helpers.read_db = staticmethod(read_db)
    return Helpers

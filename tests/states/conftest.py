"""Fixtures of the agent-state tests: real `al start` processes on offline projects."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def wait_until(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def events_of(store: Any, agent: str, type: str) -> list[dict[str, Any]]:
    return [e for e in store.agent_events(agent, limit=1000) if e["type"] == type]


@pytest.fixture
def fake_model() -> Any:
    """The e2e suite's fake Chat Completions server (real HTTP on 127.0.0.1)."""
    path = Path(__file__).parents[1] / "e2e" / "conftest.py"
    spec = importlib.util.spec_from_file_location("llamaherd_e2e_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    servers: list[Any] = []

    def start(replies: list[tuple[int, dict[str, Any]]]) -> Any:
        servers.append(module.FakeModel(replies))
        return servers[-1]

    start.reply = module.make_chat_reply
    yield start
    for server in servers:
        server.close()

"""Helpers of the agent-state tests (real `al start` processes on offline projects)."""

from __future__ import annotations

from typing import Any


def events_of(store: Any, agent: str, type: str) -> list[dict[str, Any]]:
    """The agent's events of one ``type``, oldest first."""
    return [e for e in store.agent_events(agent, limit=1000) if e["type"] == type]

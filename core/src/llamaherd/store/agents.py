"""Agents' stored states (idle, hibernate, suspended, error, off), their event log, and pausing
one agent or the whole scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llamaherd.store.connection import Connection, grouped, guarded
from llamaherd.store.schema import dumps

AGENT_STATES = ("idle", "hibernate", "suspended", "error", "off")
_PAUSED_ALL = "*"  # the paused-table row that pauses the whole scheduler


def statements(q: Callable[[str], str], pg: bool) -> dict[str, str]:
    """Prepared statements of agent states, events and pauses (``Connection._sql``)."""
    return {
        "agent_event": q(
            'INSERT INTO agent_events (agent, "at", "type", data) VALUES (?, ?, ?, ?)'
        ),
        "agent_state": q("SELECT state FROM agent_states WHERE agent = ?"),
        "agent_states": "SELECT agent, state FROM agent_states",
        "paused": 'SELECT "name" FROM paused',
        "unpause": q('DELETE FROM paused WHERE "name" = ?'),
    }


class Agents(Connection):
    """Agent states, agent events, pauses."""

    @guarded
    def agent_state(self, agent: str) -> str:
        """Stored state: idle (default), hibernate, suspended, error, off."""
        return self._value(self._sql.agent_state, (agent,)) or "idle"

    @guarded
    def agent_states(self) -> dict[str, str]:
        """Every stored agent state in one query (agents absent are ``idle``)."""
        return dict(self._exec(self._sql.agent_states).fetchall())

    @guarded
    @grouped
    def set_agent_state(self, agent: str, state: str, cause: str, history: bool = True) -> None:
        """Store the agent's state and (``history``) record a ``state`` agent event with the
        cause."""
        if state not in AGENT_STATES:
            raise ValueError(f"agent state {state!r} is not one of {', '.join(AGENT_STATES)}")
        with self._write():
            now = self._clock()
            self._upsert(self._m.AgentState, agent=agent, state=state, cause=cause, updated_at=now)
            if history:
                data = {"state": state, "cause": cause}
                self._exec(self._sql.agent_event, (agent, now, "state", dumps(data)))

    @guarded
    @grouped
    def add_agent_event(self, agent: str, type: str, data: dict[str, Any] | None = None) -> None:
        with self._write():
            self._exec(self._sql.agent_event, (agent, self._clock(), type, dumps(data or {})))

    @guarded
    def agent_events(self, agent: str, limit: int = 50) -> list[dict[str, Any]]:
        """The agent's latest ``limit`` events, oldest first: {id, at, type, data}."""
        E = self._m.AgentEvent
        query = E.select().where(E.agent == agent).order_by(E.id.desc()).limit(limit)
        return [{"id": e.id, "at": e.at, "type": e.type, "data": e.data or {}} for e in query][::-1]

    @guarded
    def set_paused(self, agent: str | None, paused: bool) -> None:
        """Pause/resume one agent, or (agent None) the whole scheduler."""
        name = _PAUSED_ALL if agent is None else agent
        with self._write():
            if paused:
                self._upsert(self._m.Paused, name=name, at=self._clock())
            else:
                self._exec(self._sql.unpause, (name,))
        # Looked at afresh by the next ``paused`` that starts after this change.
        self._paused_changes = getattr(self, "_paused_changes", 0) + 1
        self._paused_seen = None

    @guarded
    def paused(self) -> tuple[bool, set[str]]:
        """(scheduler paused, paused agents)."""
        changes = getattr(self, "_paused_changes", 0)
        names = {name for (name,) in self._exec(self._sql.paused).fetchall()}
        if changes == getattr(self, "_paused_changes", 0):  # no change of ours meanwhile
            self._paused_seen = frozenset(names)
        return _PAUSED_ALL in names, names - {_PAUSED_ALL}

    def paused_as_seen(self, agent: str) -> bool:
        """Whether this process's latest ``paused`` read said ``agent`` (or everything) is
        paused, with no ``set_paused`` of its own since: a delivery for it then wakes no
        dispatcher (``al resume`` does). No read: False. Another host's resume is seen at
        this host's next pass (each second where hosts share the database)."""
        seen = getattr(self, "_paused_seen", None)
        return seen is not None and (agent in seen or _PAUSED_ALL in seen)

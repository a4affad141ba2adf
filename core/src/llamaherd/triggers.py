"""Core's built-in trigger types: manual (``al run``) and agent calls (``call_agent``).

Neither runs a background thread: manual events come from the CLI and the control API, agent
events from the Calls skill. The agent type's ``matches`` lets a run wait for a call:
``wait_for_trigger({"type": "agent", "from": "planner"})``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llamaherd import hookimpl
from llamaherd.types import Emit, TriggerEvent

# Wait-filter keys of agent triggers and the event payload fields they compare.
AGENT_FILTER_FIELDS = {
    "from": "caller_agent",
    "caller": "caller_agent",
    "agent": "caller_agent",
    "caller_run": "caller_run",
    "call_id": "call_id",
}


class _Passive:
    """A trigger type whose events are emitted by core itself (nothing to start or stop)."""

    name = ""
    description = ""
    schema: dict[str, Any] = {}

    def start(self, ctx: Any, agents: Iterable[Any], emit: Emit) -> None:
        """Nothing to watch."""

    def stop(self) -> None:
        """Nothing to stop."""


class ManualTrigger(_Passive):
    name = "manual"
    description = "A run started by hand (`al run AGENT`, the dashboard or the control API)."


class AgentTrigger(_Passive):
    name = "agent"
    description = "A run started by another agent's call_agent (a <skill-subagent> prompt)."

    def matches(self, wait_filter: dict[str, Any], event: TriggerEvent) -> bool:
        """``from``/``caller`` (caller agent), ``caller_run``, ``call_id``, ``context``
        (substring); other keys compare payload fields by equality."""
        if event.kind != "agent":
            return False
        payload = event.payload
        for key, expected in wait_filter.items():
            if key == "type":
                continue
            if key == "context":
                if str(expected) not in str(payload.get("context", "")):
                    return False
                continue
            value = payload.get(AGENT_FILTER_FIELDS.get(key, key))
            options = expected if isinstance(expected, list) else [expected]
            if value not in options:
                return False
        return True


@hookimpl
def register_trigger_types(register):
    register(ManualTrigger())
    register(AgentTrigger())

"""Core's built-in trigger types, manual (``al run``) and agent calls (``call_agent``), and the
lookups core makes of any trigger type's policy.

Neither built-in runs a background thread: manual events come from the CLI and the control API,
agent events from the Calls skill. The agent type's ``matches`` lets a run wait for a call:
``wait_for_trigger({"type": "agent", "from": "planner"})``.

Policy a trigger type may set (``llamaherd.types.OPTIONAL_MEMBERS``), read only through the
functions here: the event ``kind`` it emits (default: its name), whether its events run a
hibernating agent (``while_hibernating``, default False), its prompt block and its preview.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from llamaherd import hookimpl
from llamaherd.types import TriggerContext, TriggerEvent, TriggerType, fragment

if TYPE_CHECKING:
    from llamaherd.plugins import Registry
    from llamaherd.project import Agent

# Wait-filter keys of agent triggers and the event payload fields they compare.
AGENT_FILTER_FIELDS = {
    "from": "caller_agent",
    "caller": "caller_agent",
    "agent": "caller_agent",
    "caller_run": "caller_run",
    "call_id": "call_id",
}
MANUAL_TEXT = (
    "You have been triggered manually. Check for new work and act on anything you find; "
    "if there is nothing to do, say so and stop."
)
# After a <user-prompt> block, as Action Llama words it.
USER_PROMPT_TEXT = "You have been given a specific task. Complete the task described above."


# ------------------------------------------------------------------ policy lookups


def trigger_kind(trigger: TriggerType) -> str:
    """The ``TriggerEvent.kind`` of the events ``trigger`` emits."""
    return getattr(trigger, "kind", None) or trigger.name


def for_kind(registry: Registry, kind: str) -> TriggerType | None:
    """The trigger type whose events have ``kind`` (by name when none declares it)."""
    types = registry.trigger_types
    found = next((t for t in types.values() if trigger_kind(t) == kind), None)
    return found or types.get(kind)


def agents_using(trigger: TriggerType, agents: Iterable[Agent]) -> list[Agent]:
    """The agents whose config sets one of the keys ``trigger`` adds; every agent when it
    adds none (a trigger that can start any agent, like ``al run``)."""
    keys = set(fragment(trigger)[0])
    return [agent for agent in agents if not keys or keys & set(agent.config)]


def block(name: str, text: str) -> str:
    """An XML-ish prompt block, as SKILL.md files written for Action Llama expect them."""
    return f"<{name}>\n{text.strip()}\n</{name}>"


def payload_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def generic_block(trigger: dict[str, Any]) -> str:
    """The trigger block of a kind whose trigger type gives none: the kind and the payload."""
    kind = trigger.get("kind") or "unknown"
    text = f"You have been triggered by a {kind} trigger."
    payload = trigger.get("payload")
    return text + ("\n\n" + block("trigger-payload", payload_json(payload)) if payload else "")


# ------------------------------------------------------------------ the built-in types


class _Passive:
    """A trigger type whose events are emitted by core itself (nothing to start or stop)."""

    name = ""
    description = ""
    schema: dict[str, Any] = {}

    def start(self, ctx: TriggerContext) -> None:
        """Nothing to watch."""

    def stop(self) -> None:
        """Nothing to stop."""


class ManualTrigger(_Passive):
    """Hibernate means timers only: a hibernating agent refuses manual runs too (the default
    ``while_hibernating``), unless the owner wakes it (``al run AGENT --wake``)."""

    name = "manual"
    description = "A run started by hand (`al run AGENT`, the dashboard or the control API)."

    def prompt_block(self, trigger: dict[str, Any]) -> str:
        """The manual text; with a ``prompt`` (``al run AGENT PROMPT``), Action Llama's
        ``<user-prompt>`` task instead. Other payload keys follow as ``<manual-payload>``."""
        payload = dict(trigger.get("payload") or {})
        prompt = payload.pop("prompt", None)
        text = MANUAL_TEXT
        if isinstance(prompt, str) and prompt.strip():
            text = block("user-prompt", prompt) + "\n\n" + USER_PROMPT_TEXT
        elif prompt is not None:
            payload["prompt"] = prompt  # not text: shown as given
        if not payload:
            return text
        return text + "\n\n" + block("manual-payload", payload_json(payload))

    def case_event(self, agent: Agent, spec: dict[str, Any]) -> TriggerEvent:
        """A test case's manual run: ``prompt`` is the task (``al run AGENT PROMPT``),
        ``payload`` the rest of what ``--payload`` gives."""
        payload = dict(spec.get("payload") or {})
        if "prompt" in spec:
            payload["prompt"] = spec["prompt"]
        return TriggerEvent(agent.name, "manual", payload, source=spec.get("source"))

    def case_trigger(self, trigger: dict[str, Any]) -> dict[str, Any]:
        """A stored manual run's ``[trigger]`` table (a run with its own trigger block, as
        ``al chat`` gives, keeps it verbatim)."""
        payload = dict(trigger.get("payload") or {})
        if trigger.get("prompt"):
            return verbatim(trigger)
        spec: dict[str, Any] = {"kind": "manual"}
        if isinstance(payload.get("prompt"), str):
            spec["prompt"] = payload.pop("prompt")
        if payload:
            spec["payload"] = payload
        if trigger.get("source"):
            spec["source"] = trigger["source"]
        return spec


def verbatim(trigger: dict[str, Any]) -> dict[str, Any]:
    """The ``[trigger]`` table of a test case that gives a stored trigger back as it is (its
    payload and its own trigger block): for a trigger type that cannot build it again."""
    spec: dict[str, Any] = {"kind": trigger.get("kind") or "manual"}
    if trigger.get("source"):
        spec["source"] = trigger["source"]
    spec["event_payload"] = trigger.get("payload") or {}
    if trigger.get("prompt"):
        spec["prompt_block"] = trigger["prompt"]
    return spec


def subagent_block(caller_agent: str, caller_run: str, context: str, call_id: Any = None) -> str:
    """``<skill-subagent>``: who called this agent and with what context."""
    head = f"caller agent: {caller_agent}\ncaller run: {caller_run}\n"
    if call_id is not None:
        head += f"call id: {call_id}\n"
    tail = "\nWhen done, pass your result to return_value (or `al-return`): the caller reads it."
    return block("skill-subagent", head + "context:\n" + context + "\n" + tail)


class AgentTrigger(_Passive):
    name = "agent"
    description = "A run started by another agent's call_agent (a <skill-subagent> prompt)."

    def prompt_block(self, trigger: dict[str, Any]) -> str:
        payload = trigger.get("payload") or {}
        return subagent_block(
            str(payload.get("caller_agent", "?")),
            str(payload.get("caller_run", "?")),
            str(payload.get("context", "")),
            payload.get("call_id"),
        )

    def preview(self, agent: Agent, payload: dict[str, Any]) -> TriggerEvent:
        placeholders = {"caller_agent": "(caller)", "caller_run": "(caller run)", "context": ""}
        return TriggerEvent(agent.name, "agent", {**placeholders, **payload}, source="preview")

    def case_event(self, agent: Agent, spec: dict[str, Any]) -> TriggerEvent:
        """A test case's call from another agent: ``caller``, ``caller_run``, ``call_id``,
        ``context``, ``depth`` (no call record: the return value goes nowhere)."""
        payload = {
            "call_id": spec.get("call_id", 1),
            "caller_agent": spec.get("caller", "caller"),
            "caller_run": spec.get("caller_run", "caller-run"),
            "context": spec.get("context", ""),
            "depth": spec.get("depth", 1),
        }
        return TriggerEvent(agent.name, "agent", payload, source=payload["caller_agent"])

    def case_trigger(self, trigger: dict[str, Any]) -> dict[str, Any]:
        payload = trigger.get("payload") or {}
        names = {"caller": "caller_agent", "caller_run": "caller_run", "call_id": "call_id"}
        names.update(context="context", depth="depth")
        spec = {
            key: payload[field] for key, field in names.items() if payload.get(field) is not None
        }
        return {"kind": "agent", **spec}

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

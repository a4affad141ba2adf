"""The ``webhooks`` trigger type: agent config schema, the events it emits, wait matching.

Deliveries arrive through the routes (``llamaherd_webhooks.routes``), so ``start`` has nothing
to run.
"""

from __future__ import annotations

import json
from typing import Any

from llamaherd.api import Agent, TriggerContext, TriggerEvent
from llamaherd_webhooks.matching import (
    ENTRY_KEYS,
    entry_matches,
    fields_match,
    normalise_filter,
)

_STRINGS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_SCALAR = {"type": ["string", "number", "boolean"]}
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["source"],
    "properties": {
        "source": {"type": "string", "description": "Name of a [webhooks.<name>] source."},
        **{
            key: {**_STRINGS, "description": description}
            for key, description in {
                "events": 'Event names; "pull_request.opened" narrows to one action.',
                "actions": "Payload actions (opened, closed, ...).",
                "repos": 'Repository full names; globs allowed ("org/*").',
                "orgs": "Organisations.",
                "branches": "Pushed branch, or a pull request's base branch; globs allowed.",
                "labels": "Any of these labels is present.",
                "assignee": "Assigned to any of these logins.",
                "author": "Opened or pushed by any of these logins.",
                "conclusions": "Check/workflow run conclusions.",
            }.items()
        },
        "match": {
            "type": "object",
            "description": "Dotted payload path -> value, or list of accepted values.",
            "additionalProperties": {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR}]},
        },
    },
}
AGENT_SCHEMA: dict[str, Any] = {"webhooks": {"type": "array", "items": ENTRY_SCHEMA}}
# Normalised fields shown before the payload in <webhook-trigger>, in this order, when present.
PROMPT_FIELDS = (
    "source",
    "event",
    "action",
    "repo",
    "number",
    "title",
    "url",
    "sender",
    "author",
    "ref",
    "branch",
    "labels",
    "conclusion",
    "delivery",
)


def make_event(agent: str, source: str, fields: dict[str, Any]) -> TriggerEvent:
    """The event for one delivery: routed to ``agent``, or with agent "" only offered to waiting
    runs. Its dedupe key makes a redelivery a no-op. The payload is the normalised fields plus
    the full body under ``payload``; the session renders it as the ``<webhook-trigger>`` block."""
    return TriggerEvent(
        agent=agent,
        kind="webhook",
        payload={"source": source, **fields},
        source=source,
        dedupe_key=f"{source}:{fields.get('delivery')}:{agent}",
    )


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class WebhooksTrigger:
    """TriggerType ``webhooks``."""

    name = "webhooks"
    kind = "webhook"
    description = "Runs agents on HTTP webhooks (POST /webhooks/<source>) matching their filters."
    schema = AGENT_SCHEMA

    def start(self, ctx: TriggerContext) -> None:
        """Nothing to run: deliveries come in through the HTTP routes."""

    def prompt_block(self, trigger: dict[str, Any]) -> str:
        """``<webhook-trigger>``: the normalised fields, then the full payload as JSON."""
        data = trigger.get("payload") or {}
        fields = {"source": trigger.get("source"), **data}
        lines = [
            f"{key}: {_scalar(fields[key])}" for key in PROMPT_FIELDS if fields.get(key) is not None
        ]
        raw = data.get("payload", data)
        lines.append("payload:\n" + json.dumps(raw, indent=2, sort_keys=True, default=str))
        return "<webhook-trigger>\n" + "\n".join(lines) + "\n</webhook-trigger>"

    def describe(self, agent: Agent) -> str | None:
        """``webhooks: github (issues.opened), sentry``, for ``al stat``."""
        entries = agent.config.get("webhooks") or []
        if not entries:
            return None
        parts = []
        for entry in entries:
            events = entry.get("events")
            events = [events] if isinstance(events, str) else events or []
            suffix = f" ({', '.join(map(str, events))})" if events else ""
            parts.append(f"{entry.get('source', '?')}{suffix}")
        return "webhooks: " + ", ".join(parts)

    def stop(self) -> None:
        """Nothing to stop."""

    def matches(self, wait_filter: dict[str, Any], event: TriggerEvent) -> bool:
        """Does a webhook event satisfy a ``wait_for_trigger`` filter? The filter takes the keys
        of a ``[[webhooks]]`` entry (singular spellings too, ``source`` optional); any other key
        must equal the event's field of that name (``number``) or, when there is none, the raw
        payload's at that dotted path (``pull_request.base.ref``, ``payload.`` prefix optional)."""
        if event.kind != "webhook":
            return False
        conditions = normalise_filter(
            {k: v for k, v in wait_filter.items() if k not in ("type", "kind")}
        )
        known = {k: v for k, v in conditions.items() if k in ENTRY_KEYS}
        fields = {k: v for k, v in conditions.items() if k not in ENTRY_KEYS}
        return entry_matches(known, event.source, event.payload) and fields_match(
            fields, event.payload
        )

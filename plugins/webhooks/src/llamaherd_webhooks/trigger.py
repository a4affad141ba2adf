"""The ``webhooks`` trigger type: agent config schema, the events it emits, wait matching.

Deliveries arrive through the routes (``llamaherd_webhooks.routes``), so ``start`` has nothing
to run.
"""

from __future__ import annotations

import json
from typing import Any

from llamaherd.api import (
    Agent,
    ConfigError,
    Registry,
    TriggerContext,
    TriggerEvent,
    TriggerInfo,
    WebhookFilter,
    WebhookSource,
)
from llamaherd_webhooks.matching import (
    COMMON_KEYS,
    entry_matches,
    fields_match,
    filters_of,
    normalise_filter,
)

_STRINGS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
_SCALAR = {"type": ["string", "number", "boolean"]}
# The keys of every [[webhooks]] entry (``matching.COMMON_KEYS``); each installed source type
# adds its filter keys (``entry_schema``).
COMMON_PROPERTIES: dict[str, Any] = {
    "source": {"type": "string", "description": "Name of a [webhooks.<name>] source."},
    "events": {
        **_STRINGS,
        "description": 'Event names; "pull_request.opened" narrows to one action.',
    },
    "match": {
        "type": "object",
        "description": "Dotted payload path -> value, or list of accepted values.",
        "additionalProperties": {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR}]},
    },
}
# What follows the block, in Action Llama's words.
ACT = "A webhook event just fired. Review the trigger context above and take appropriate action."
# Normalised fields shown before the payload in <webhook-trigger>, in this order, when present.
PROMPT_FIELDS = (
    "source",
    "event",
    "action",
    "repo",
    "project",
    "org",
    "team",
    "guild",
    "channel",
    "command",
    "user",
    "number",
    "title",
    "url",
    "sender",
    "author",
    "assignee",
    "ref",
    "branch",
    "labels",
    "conclusion",
    "comment",
    "body",
    "delivery",
)


def describe_entries(agent: Agent) -> list[TriggerInfo]:
    """One ``TriggerInfo`` per ``[[webhooks]]`` entry: its source and its filters."""
    found = []
    for entry in agent.config.get("webhooks") or []:
        details = {
            key: ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            for key, value in entry.items()
            if key != "source"
        }
        found.append(TriggerInfo("webhook", str(entry.get("source", "?")), details))
    return found


def filter_owners(sources: dict[str, WebhookSource]) -> dict[str, dict[str, WebhookFilter]]:
    """Filter key -> {source type: its declaration}, over every installed source type."""
    owners: dict[str, dict[str, WebhookFilter]] = {}
    for name, source in sorted(sources.items()):
        for key, spec in filters_of(source).items():
            owners.setdefault(key, {})[name] = spec
    return owners


def entry_schema(sources: dict[str, WebhookSource]) -> dict[str, Any]:
    """A ``[[webhooks]]`` entry: the common keys and every installed source type's filters
    (which of them an entry may use depends on its source's type: ``WebhooksTrigger.validate``)."""
    properties = dict(COMMON_PROPERTIES)
    for key, declared in filter_owners(sources).items():
        properties[key] = {**_STRINGS, "description": _describe(declared)}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["source"],
        "properties": properties,
    }


def _describe(declared: dict[str, WebhookFilter]) -> str:
    """One filter key's description, per source type: ``github, generic: ...; slack: ...``."""
    types: dict[str, list[str]] = {}
    for kind, spec in declared.items():
        types.setdefault(spec.description.strip().rstrip("."), []).append(kind)
    return (
        "; ".join(f"{', '.join(kinds)}: {text}".rstrip(": ") for text, kinds in types.items()) + "."
    )


def agent_schema(sources: dict[str, WebhookSource]) -> dict[str, Any]:
    return {"webhooks": {"type": "array", "items": entry_schema(sources)}}


def make_event(agent: str, source: str, kind: str, fields: dict[str, Any]) -> TriggerEvent:
    """The event for one delivery from source ``source`` (of type ``kind``): routed to
    ``agent``, or with agent "" only offered to waiting runs. Its dedupe key makes a redelivery a
    no-op. The payload is the normalised fields plus the full body under ``payload``; the
    session renders it as the ``<webhook-trigger>`` block."""
    return TriggerEvent(
        agent=agent,
        kind="webhook",
        payload={"source": source, "source_type": kind, **fields},
        source=source,
        dedupe_key=dedupe_key(source, fields.get("delivery"), agent),
    )


def dedupe_key(source: str, delivery: Any, agent: str) -> str:
    """The work item key of ``agent``'s event for one delivery: a redelivery queues nothing
    new, and the dashboard finds the runs a delivery started by it."""
    return f"{source}:{delivery}:{agent}"


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


class WebhooksTrigger:
    """TriggerType ``webhooks``."""

    name = "webhooks"
    kind = "webhook"
    description = "Runs agents on HTTP webhooks (POST /webhooks/<source>) matching their filters."
    schema = agent_schema({})  # until ``bind``: the common keys only

    def __init__(self) -> None:
        self.sources: dict[str, WebhookSource] = {}
        self.registry: Registry | None = None

    def bind(self, registry: Registry) -> None:
        """Take every installed webhook source type: their filter keys join the entry schema,
        and waits match with them."""
        self.registry = registry
        self.sources = dict(registry.webhook_sources)
        self.schema = agent_schema(self.sources)

    def preview(self, agent: Agent, payload: dict[str, Any]) -> TriggerEvent:
        """The event a real delivery of ``payload`` gives ``agent`` (``al prompt --trigger
        webhook --payload FILE``): parsed by its source, as ``llamaherd_webhooks.preview``."""
        from llamaherd_webhooks.preview import preview_event

        assert self.registry is not None, "the registry binds every trigger type"
        return preview_event(agent, self.registry, payload)

    def case_event(self, agent: Agent, spec: dict[str, Any]) -> TriggerEvent:
        """The event of a test case's delivery (``al test``): as ``preview``, from the case's
        ``source``, ``event``, ``delivery`` and ``payload`` (``llamaherd_webhooks.preview``)."""
        from llamaherd_webhooks.preview import case_event

        assert self.registry is not None, "the registry binds every trigger type"
        return case_event(agent, self.registry, spec)

    def case_trigger(self, trigger: dict[str, Any]) -> dict[str, Any]:
        """The ``[trigger]`` of a test case ``al record`` writes for a stored webhook run."""
        from llamaherd_webhooks.preview import case_trigger

        return case_trigger(trigger)

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
        return "<webhook-trigger>\n" + "\n".join(lines) + "\n</webhook-trigger>\n\n" + ACT

    def stop(self) -> None:
        """Nothing to stop."""

    def validate(self, agent: Agent) -> list[ConfigError]:
        """Each ``[[webhooks]]`` entry uses only the filter keys of its source's type."""
        tables = agent.project.config.get("webhooks") or {}
        problems = []
        for i, entry in enumerate(agent.config.get("webhooks") or []):
            name = entry.get("source") if isinstance(entry, dict) else None
            table = tables.get(name) if isinstance(name, str) else None
            source = self.sources.get(table.get("type")) if isinstance(table, dict) else None
            if source is None:  # an unknown source or a missing plugin: core reports it
                continue
            allowed = COMMON_KEYS | set(filters_of(source))
            problems += [
                ConfigError(
                    str(agent.config_file),
                    f"webhooks[{i}].{key}",
                    self._misplaced(key, source.name, name, sorted(allowed - {"source"})),
                )
                for key in entry
                if key not in allowed
            ]
        return problems

    def _misplaced(self, key: str, kind: str, name: str, allowed: list[str]) -> str:
        owners = ", ".join(filter_owners(self.sources).get(key, {})) or "no installed"
        return (
            f'not a filter of source "{name}" (type {kind}), only of {owners} sources; '
            f"its filters: {', '.join(allowed)}"
        )

    def matches(self, wait_filter: dict[str, Any], event: TriggerEvent) -> bool:
        """Does a webhook event satisfy a ``wait_for_trigger`` filter? The filter takes the keys
        of a ``[[webhooks]]`` entry for the event's source type (singular spellings too,
        ``source`` optional); any other key must equal the event's field of that name
        (``number``) or, when there is none, the raw payload's at that dotted path
        (``pull_request.base.ref``, ``payload.`` prefix optional)."""
        if event.kind != "webhook":
            return False
        filters = filters_of(self.sources.get(str(event.payload.get("source_type"))))
        conditions = normalise_filter(
            {k: v for k, v in wait_filter.items() if k not in ("type", "kind")}, filters
        )
        keys = COMMON_KEYS | set(filters)
        known = {k: v for k, v in conditions.items() if k in keys}
        fields = {k: v for k, v in conditions.items() if k not in keys}
        return entry_matches(known, event.source, event.payload, filters) and fields_match(
            fields, event.payload
        )

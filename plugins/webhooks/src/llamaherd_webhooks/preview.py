"""What ``al prompt AGENT --trigger webhook --payload FILE`` shows: the event a real delivery of
FILE would give AGENT, built by the same code (the source's ``parse``, the agent's filters,
``make_event``), so the ``<webhook-trigger>`` block is the run's own.

FILE is a delivery body (a JSON object), or a recorded one: ``{"headers": {...}, "body": ...}``
(Action Llama's ``al webhook replay`` fixtures) or ``{"headers": {...}, "payload": ...}`` (ours).
Headers a bare body lacks are those a genuine sender adds (``request_headers``), with the event
taken from the agent's ``[[webhooks]]`` entry (its first ``events`` value).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from llamaherd.api import Agent, LlamaherdError, Registry, TriggerEvent, unrouted
from llamaherd_webhooks.ingest import SourceConfig, resolve_source
from llamaherd_webhooks.matching import as_list, entry_matches, filters_of
from llamaherd_webhooks.trigger import make_event

log = logging.getLogger("llamaherd.webhooks")

PREVIEW_DELIVERY = "preview"


def recorded(data: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    """Headers (lower-cased) and raw body of a payload file: a recorded delivery or a body."""
    headers = data.get("headers")
    key = next((k for k in ("body", "payload") if k in data), None)
    if not isinstance(headers, dict) or key is None:
        return {}, json.dumps(data).encode()
    body = data[key]
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return {str(k).lower(): str(v) for k, v in headers.items()}, raw


def _entry_event(entry: dict[str, Any]) -> str | None:
    """The event an entry listens for first (``pull_request.opened`` -> ``pull_request``)."""
    events = [e for e in as_list(entry.get("events") or []) if isinstance(e, str)]
    return events[0].split(".")[0] if events else None


def _parse(
    config: SourceConfig,
    entry: dict[str, Any],
    headers: dict[str, str],
    body: bytes,
    event: str | None = None,
    delivery: str = PREVIEW_DELIVERY,
    where: str = "--payload",
) -> dict[str, Any]:
    """The source's own fields for this delivery, with the headers a sender would add (for
    ``event``, default the entry's first, and ``delivery``)."""
    sign = getattr(config.source, "request_headers", None)
    synthetic = sign(body, event or _entry_event(entry), delivery, None) if sign else {}
    try:
        fields = config.source.parse(
            {**{k.lower(): v for k, v in synthetic.items()}, **headers}, body
        )
    except ValueError as exc:
        raise LlamaherdError(f"{where}: source {config.name!r} cannot parse it: {exc}") from None
    if why := unrouted(fields):
        raise LlamaherdError(
            f"source {config.name!r} acknowledges this delivery ({why}) without running anything"
        )
    return fields


def preview_event(agent: Agent, registry: Registry, payload: dict[str, Any]) -> TriggerEvent:
    """The event of the first ``[[webhooks]]`` entry of ``agent`` that the delivery matches
    (else of its first entry, with a warning: a real delivery would not run it)."""
    entries = [e for e in agent.config.get("webhooks") or [] if isinstance(e, dict)]
    if not entries:
        raise LlamaherdError(f"agent {agent.name!r} has no [[webhooks]] entry: no webhook runs it")
    headers, body = recorded(payload)
    first: tuple[SourceConfig, dict[str, Any]] | None = None
    for entry in entries:
        config = resolve_source(agent.project, registry, str(entry.get("source")))
        if not isinstance(config, SourceConfig):
            raise LlamaherdError(f"webhooks[{entries.index(entry)}].source: {config.body['error']}")
        fields = _parse(config, entry, headers, body)
        if entry_matches(entry, config.name, fields, filters_of(config.source)):
            return make_event(agent.name, config.name, config.kind, fields)
        first = first or (config, fields)
    assert first is not None
    config, fields = first
    log.warning(
        "warning: this delivery matches none of %s's [[webhooks]] entries (a real one would not "
        "run it); showing the prompt of its first entry (source %s)",
        agent.name,
        config.name,
    )
    return make_event(agent.name, config.name, config.kind, fields)


TEST_DELIVERY = "test"


def case_event(agent: Agent, registry: Registry, spec: dict[str, Any]) -> TriggerEvent:
    """The event a test case's delivery gives ``agent``: ``payload`` (a body, or a recorded
    delivery with its headers) from ``source`` as ``event`` with id ``delivery``, parsed by
    the source and matched against the agent's ``[[webhooks]]`` entries as a real delivery is.
    One that matches none is an error: a real delivery would not run the agent."""
    entries = [e for e in agent.config.get("webhooks") or [] if isinstance(e, dict)]
    wanted = spec.get("source")
    if wanted is not None:
        entries = [e for e in entries if e.get("source") == wanted]
    if not entries:
        source = f" from source {wanted!r}" if wanted is not None else ""
        raise LlamaherdError(f"agent {agent.name!r} has no [[webhooks]] entry{source}")
    headers, body = recorded(spec.get("payload") or {})
    headers.update({str(k).lower(): str(v) for k, v in (spec.get("headers") or {}).items()})
    delivery = str(spec.get("delivery") or TEST_DELIVERY)
    for entry in entries:
        config = resolve_source(agent.project, registry, str(entry.get("source")))
        if not isinstance(config, SourceConfig):
            raise LlamaherdError(f"source: {config.body['error']}")
        fields = _parse(config, entry, headers, body, spec.get("event"), delivery, "payload")
        if entry_matches(entry, config.name, fields, filters_of(config.source)):
            return make_event(agent.name, config.name, config.kind, fields)
    raise LlamaherdError(
        f"the delivery matches none of {agent.name}'s [[webhooks]] entries: a real one would "
        "not run it"
    )


def case_trigger(trigger: dict[str, Any]) -> dict[str, Any]:
    """The ``[trigger]`` table that gives a stored webhook run's event back: its source, its
    event, its delivery id and the body it was delivered with."""
    fields = trigger.get("payload") or {}
    spec: dict[str, Any] = {
        "kind": "webhook",
        "source": trigger.get("source") or fields.get("source"),
    }
    for key in ("event", "delivery"):
        if fields.get(key) is not None:
            spec[key] = str(fields[key])
    spec["payload"] = fields.get("payload", {})
    return spec

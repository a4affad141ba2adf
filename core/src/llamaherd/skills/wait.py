"""Wait: park the run until a matching trigger arrives (or the wait times out)."""

from __future__ import annotations

from typing import Any

from llamaherd.durations import parse_duration
from llamaherd.session import Deferred
from llamaherd.skills.base import CoreSkill, obj
from llamaherd.types import Tool

PREAMBLE = """\
Waiting:
- wait_for_trigger(type, source?, event?, match?, source_agent?, timeout?): pause this run \
until a matching event arrives, then get it as the tool result. type "webhook" (with the \
webhook source, event and {"dot.path": value} payload match) or "agent_trigger" (with the \
calling agent as source_agent). Or give one filter: {"type": "agent", "from": "reviewer"}, \
{"type": "webhooks", "event": "pull_request", "action": "closed"}. timeout like "30m" or \
"1h30m" (default: the agent's waitTimeout). While waiting you use no resources; on timeout \
you get an error result."""


def wait_timeout(ctx: Any, value: Any) -> float:
    """The call's timeout, else the agent's waitTimeout, else defaultWaitTimeout, else 1800 s."""
    if value not in (None, ""):
        return parse_duration(value, "wait_for_trigger timeout")
    return float(ctx.agent.wait_timeout or 1800)


def check_filter(wait_filter: Any) -> dict[str, Any]:
    """A wait filter: an object with a string "type"."""
    if not isinstance(wait_filter, dict) or not isinstance(wait_filter.get("type"), str):
        raise ValueError('filter must be an object with a "type", e.g. {"type": "agent"}')
    return wait_filter


def peer_filter(args: dict[str, Any]) -> dict[str, Any]:
    """The filter of Action Llama's call form: ``type`` "webhook" with ``source``, ``event``
    and ``match``, or "agent_trigger" with ``source_agent``."""
    kind = args.get("type")
    if kind == "agent_trigger":
        found = {"type": "agent"}
        if args.get("source_agent"):
            found["from"] = args["source_agent"]
        return found
    if kind == "webhook":
        found = {"type": "webhooks"}
        found.update({k: args[k] for k in ("source", "event", "match") if args.get(k)})
        return found
    raise ValueError(f'type must be "webhook" or "agent_trigger" (or give a filter), got {kind!r}')


def wait_for_trigger(ctx: Any, args: dict[str, Any]) -> Any:
    raw = args.get("filter") if "filter" in args else peer_filter(args)
    wait_filter = check_filter(raw)
    return Deferred(
        "wait", {"filter": wait_filter, "timeout": wait_timeout(ctx, args.get("timeout"))}
    )


SKILL = CoreSkill(
    name="wait",
    category="wait",
    text=PREAMBLE,
    tools=[
        Tool(
            "wait_for_trigger",
            "Pause until a matching trigger (webhook event or agent trigger) arrives; returns it.",
            obj(
                {
                    "type": {"enum": ["webhook", "agent_trigger"]},
                    "source": {"type": "string", "description": "Webhook source to match"},
                    "event": {"type": "string", "description": "Event type to match"},
                    "match": {"type": "object", "description": "Dot-path payload equalities"},
                    "source_agent": {"type": "string", "description": "agent_trigger: from"},
                    "timeout": {"type": "string", "description": 'e.g. "30m", "2h"'},
                    "filter": {"type": "object", "description": "Or one filter with a type"},
                }
            ),
            wait_for_trigger,
        ),
    ],
)

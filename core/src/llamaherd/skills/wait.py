"""Wait: park the run until a matching trigger arrives (or the wait times out)."""

from __future__ import annotations

from typing import Any

from llamaherd.durations import parse_duration
from llamaherd.session import Deferred
from llamaherd.skills.base import CoreSkill, obj
from llamaherd.types import Tool

PREAMBLE = """\
Waiting:
- wait_for_trigger(filter, timeout): pause this run until a matching event arrives, then get it \
as the tool result. filter has a "type" ("agent", "webhooks", ...) plus fields to match, e.g. \
{"type": "agent", "from": "reviewer"} or {"type": "webhooks", "event": "pull_request", \
"action": "closed"}. timeout like "30m" or "2h" (default: the agent's waitTimeout). While \
waiting you use no resources; on timeout you get an error result."""


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


def wait_for_trigger(ctx: Any, args: dict[str, Any]) -> Any:
    wait_filter = check_filter(args.get("filter"))
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
            "Pause until a trigger matching filter arrives; returns it.",
            obj({"filter": {"type": "object"}, "timeout": {"type": "string"}}, ("filter",)),
            wait_for_trigger,
        ),
    ],
)

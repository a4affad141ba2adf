"""Events: an agent reads what went wrong in its own recent runs, to drive its own fallback.

Every run event has a level: ``provider_error`` (a transient model failure, retried) is
``warn``, ``turn_error`` (a turn that failed for good) and ``run_error`` are ``error``; events
that carry their own ``level`` keep it; the rest are ``info``. Only the agent's own runs are
readable: another agent's run is "not found", as if it did not exist.
"""

from __future__ import annotations

from typing import Any

from llamaherd.skills.base import CoreSkill, obj, refuse
from llamaherd.types import Tool

PREAMBLE = """\
Your own events (also `al-events [--level info|warn|error] [--run ID] [--limit N]`):
- recent_events(level, run, limit): the events of your recent runs, newest last. level "warn" \
(the default) gives transient provider failures ("provider_error", retried for you) and \
failures that ended a turn or a run ("turn_error", "run_error"); "info" gives everything. \
Use it to choose a fallback when your previous runs kept failing."""

LEVELS = ("info", "warn", "error")
# Levels of the event types that do not carry their own.
TYPE_LEVELS = {
    "provider_error": "warn",
    "hook_error": "warn",
    "rerun_refused": "warn",
    "interrupt_error": "warn",
    "turn_error": "error",
    "run_error": "error",
}
RUNS_SCANNED = 10  # the agent's latest runs recent_events reads
MAX_EVENTS = 200


def level_of(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    level = data.get("level") or TYPE_LEVELS.get(event["type"], "info")
    return level if level in LEVELS else "info"


def _row(run_id: str, event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data") or {}
    message = next(
        (data[k] for k in ("message", "reason", "error", "text", "tool") if data.get(k)), ""
    )
    return {
        "run": run_id,
        "at": event["at"],
        "type": event["type"],
        "level": level_of(event),
        "origin": data.get("origin") or "runner",
        "event": data.get("event") or event["type"],
        "message": str(message)[:500],
        **{k: data[k] for k in ("error_class", "model", "action", "attempt") if k in data},
    }


def _limit(args: dict[str, Any]) -> int:
    try:
        limit = int(args.get("limit") or 20)
    except (TypeError, ValueError):
        raise ValueError(f"limit must be a number, got {args.get('limit')!r}") from None
    return max(1, min(limit, MAX_EVENTS))


def recent_events(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    level = str(args.get("level") or "warn")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    limit = _limit(args)
    if args.get("run"):
        run = ctx.store.find_run(str(args["run"]))
        if run is None or run.agent != ctx.agent.name:  # others' runs do not exist for it
            return refuse(f"no run {args['run']!r} of agent {ctx.agent.name!r}")
        runs = [run]
    else:
        runs = ctx.store.runs(agent=ctx.agent.name, limit=RUNS_SCANNED)
    floor = LEVELS.index(level)
    rows = [
        _row(run.id, event)
        for run in reversed(runs)  # oldest run first: the answer reads newest last
        for event in ctx.store.events(run.id)
        if LEVELS.index(level_of(event)) >= floor
    ]
    return {"ok": True, "events": rows[-limit:]}


SKILL = CoreSkill(
    name="events",
    category="events",
    text=PREAMBLE,
    tools=[
        Tool(
            "recent_events",
            "Events of your own recent runs (level warn: failures), newest last.",
            obj(
                {
                    "level": {"type": "string", "enum": list(LEVELS)},
                    "run": {"type": "string", "description": "one of your runs (id)"},
                    "limit": {"type": "integer"},
                }
            ),
            recent_events,
        ),
    ],
)

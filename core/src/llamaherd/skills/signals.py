"""Signals: status updates, the run's return value, and the rerun request."""

from __future__ import annotations

import json
from typing import Any

from llamaherd.skills.base import MAX_RETURN, MAX_STATUS, CoreSkill, capped, obj
from llamaherd.types import Tool

PREAMBLE = """\
Signals (also shell commands `al-status`, `al-return`, `al-rerun`):
- set_status(text): a one-line progress update people see while you work. Use it at each step.
- return_value(value): your run's result (text or JSON). A caller agent receives it.
- rerun(): on a scheduled run, say there is more work; you will run again right after this."""


def set_status(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    text = ctx.redact(capped("status text", str(args.get("text", "")), MAX_STATUS)).strip()
    if not text:
        raise ValueError("set_status needs a non-empty text")
    if ctx.within_budget(len(text.encode("utf-8"))):
        ctx.store.set_status(ctx.run_id, text)
    else:  # the run's write budget is spent: the current status only, no history
        ctx.store.update_run(ctx.run_id, status=text)
    ctx.log("status", {"text": text})
    return {"ok": True}


def return_value(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    if "value" not in args:
        raise ValueError("return_value needs a value")
    size = len(
        capped("the return value (as JSON)", json.dumps(args["value"], default=str), MAX_RETURN)
    )
    value = ctx.redact_obj(args["value"])
    if ctx.within_budget(size):
        ctx.store.set_return(ctx.run_id, value)
    else:  # the run's write budget is spent: the value, without its event
        ctx.store.update_run(ctx.run_id, return_value=value)
    return {"ok": True}


def rerun(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    ctx.store.update_run(ctx.run_id, rerun_requested=True)
    if ctx.trigger.get("kind") != "scheduled":
        return {"ok": True, "note": "only scheduled runs rerun; this one will not"}
    return {"ok": True}


SKILL = CoreSkill(
    name="signals",
    category="signals",
    text=PREAMBLE,
    tools=[
        Tool(
            "set_status",
            f"Publish a one-line progress update (at most {MAX_STATUS:,} characters).",
            obj({"text": {"type": "string"}}, ("text",)),
            set_status,
        ),
        Tool(
            "return_value",
            f"Set this run's result (text or any JSON value; at most {MAX_RETURN:,} characters "
            "as JSON).",
            obj({"value": {"description": "The result: a string or JSON value."}}, ("value",)),
            return_value,
        ),
        Tool(
            "rerun",
            "Ask for another scheduled run right after this one (more work left).",
            obj({}),
            rerun,
        ),
    ],
)

"""Calls: start another agent with a context and read its return value later.

Call ids are per run: a run's first call is 1, its second 2, ... (the store's own ids are
global; ``call_ids`` maps between them), so `al-subagent-wait 1` means this run's first call.
"""

from __future__ import annotations

import json
from typing import Any

from llamaherd.skills.base import MAX_CALL_CONTEXT, CoreSkill, capped, obj, refuse
from llamaherd.types import Tool, TriggerEvent
from llamaherd.write_budget import CALL_BYTES, SPENT

PREAMBLE = """\
Calls (also `al-subagent AGENT CONTEXT`, `al-subagent-check ID`, `al-subagent-wait ID [TIMEOUT]`):
- call_agent(target_agent, context): start another agent of this project with a context text; \
returns a call_id at once. The callee works in its own run and sets a return value.
- check_call(call_id): its status: "pending" (queued), "running", "completed" with the callee's \
return_value, or "error". Poll it sparingly (do other work in between), or run \
`al-subagent-wait ID` in bash to block."""


def call_chain(ctx: Any) -> list[str]:
    """Agent names from the first caller down to this run's agent."""
    names, row, seen = [], ctx.row(), set()
    while row is not None and row.id not in seen:
        seen.add(row.id)
        names.append(row.agent)
        row = ctx.store.get_run(row.caller_run) if row.caller_run else None
    return list(reversed(names))


def call_agent(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    target = str(args.get("target_agent") or args.get("agent") or "")
    context = capped("the call context", str(args.get("context", "")), MAX_CALL_CONTEXT)
    agents = ctx.project.agents
    if target not in agents:
        return refuse(f"no agent {target!r} (agents: {', '.join(sorted(agents))})")
    if target == ctx.agent.name:
        return refuse("an agent cannot call itself")
    row = ctx.row()
    depth = (row.call_depth or 0) + 1
    limit = int(ctx.project.setting("maxCallDepth"))
    if depth > limit:
        chain = " -> ".join([*call_chain(ctx), target])
        return refuse(f"call depth {depth} exceeds maxCallDepth ({limit}): {chain}")
    full = _full_queue(ctx, target)
    if full:  # refused before anything is written: a refused call stores nothing
        return refuse(f"call to {target!r} refused: {full}")
    context = ctx.redact(context)
    # The call row and the callee's queued trigger each hold the context (the trigger as JSON).
    size = len(context.encode("utf-8", "surrogatepass")) + len(json.dumps(context)) + CALL_BYTES
    if not ctx.within_budget(size, records=2):
        return refuse(f"call to {target!r} refused: {SPENT}")
    # Before the call is recorded: a callee that is off or hibernating refuses it (recorded
    # on the callee), and no call is left pending for a run that never comes.
    refused = ctx.engine.gate(target, "agent", {"caller_run": ctx.run_id})
    if refused:
        return refuse(f"call to {target!r} refused: {refused}")
    try:
        call_id, result = _make_call(ctx, target, context, depth)
    except _Refused as exc:
        return refuse(f"call to {target!r} refused: {exc}")
    ctx.log("call", {"call_id": call_id, "agent": target, "depth": depth})
    if result.queued is None and result.resumed:
        # A run of the target waiting for exactly this call took it: no new run, no result.
        return {
            "ok": True,
            "call_id": call_id,
            "delivered_to": result.resumed,
            "note": "delivered to a waiting run; check_call will stay pending",
        }
    return {"ok": True, "call_id": call_id}


def _full_queue(ctx: Any, target: str) -> str | None:
    """Why the callee's queue has no room for a call, or None. A full queue drops its oldest
    item for a new trigger; a call is refused instead, so a run cannot push other triggers
    out of another agent's queue, nor leave calls behind that were dropped at once (each
    holding its context twice, for ``historyRetentionDays``)."""
    limit = ctx.project.agents[target].queue_size
    queued = ctx.store.queue_depth(target).get(target, 0)
    if queued < max(limit, 1):
        return None
    return f"its queue is full ({queued} queued, maxWorkQueueSize {limit}); call again later"


class _Refused(Exception):
    """The callee's queue refused the call: the call is rolled back with it."""


def _make_call(ctx: Any, target: str, context: str, depth: int) -> tuple[int, Any]:
    """Record the call and queue (or hand to a waiting run) the callee's trigger in one
    transaction: a crash in between must not leave a call pending that nothing will settle."""
    with ctx.store.atomic():
        full = _full_queue(ctx, target)  # again, in the transaction: calls made meanwhile
        if full:
            raise _Refused(full)
        stored_id = ctx.store.create_call(ctx.run_id, target, context, depth)
        call_id = ctx.store.call_ids(ctx.run_id).index(stored_id) + 1
        payload = {
            "call_id": call_id,
            "caller_agent": ctx.agent.name,
            "caller_run": ctx.run_id,
            "context": context,
            "depth": depth,
        }
        event = TriggerEvent(
            agent=target, kind="agent", payload=payload, source=ctx.agent.name, call_id=stored_id
        )
        result = ctx.engine.emit(event)
        if result.refused:
            raise _Refused(result.refused)
    return call_id, result


def check_call(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    try:
        call_id = int(args.get("call_id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return refuse(f"call_id must be a number, got {args.get('call_id')!r}")
    made = ctx.store.call_ids(ctx.run_id)
    if not 1 <= call_id <= len(made):
        return refuse(f"no call {call_id} made by this run (it made {len(made)})")
    call = ctx.store.get_call(made[call_id - 1])
    answer: dict[str, Any] = {
        "ok": True,
        "call_id": call_id,
        "agent": call["target"],
        "status": call_status(ctx, call),
        "state": call["state"],
    }
    if call["state"] == "done":
        answer["return_value"] = call.get("return_value")
    elif call["state"] == "error":
        answer["error"] = call.get("error")
    return answer


def call_status(ctx: Any, call: dict[str, Any]) -> str:
    """Action Llama's status of a call: pending (not started), running, completed, error."""
    if call["state"] == "done":
        return "completed"
    if call["state"] == "error":
        return "error"
    run = ctx.store.get_run(call["run_id"]) if call.get("run_id") else None
    return "running" if run is not None and run.state in ("running", "waiting") else "pending"


SKILL = CoreSkill(
    name="calls",
    category="calls",
    text=PREAMBLE,
    tools=[
        Tool(
            "call_agent",
            "Start another agent with a context; returns a call_id.",
            # Action Llama's argument names (``agent``, the earlier name, is still read).
            obj(
                {
                    "target_agent": {"type": "string", "description": "Name of the agent to call"},
                    "context": {"type": "string", "description": "What the agent should do"},
                },
                ("target_agent", "context"),
            ),
            call_agent,
        ),
        Tool(
            "check_call",
            "Status of a call: pending, running, completed (with return_value) or error.",
            obj({"call_id": {"type": "integer"}}, ("call_id",)),
            check_call,
        ),
    ],
)

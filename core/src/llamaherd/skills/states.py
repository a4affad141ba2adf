"""States: an agent sets its own state (idle, hibernate, off), which ends the run that set it.

``set_state`` (the model's tool, and ``al-state`` in the sandbox) applies at once; the ``state``
shell command applies when the tool call (or hook command) that ran it ends. Either way the run
then ends ``done``: at once for ``off`` (the rest of the turn's tool calls are not run), at the
end of the current turn for ``idle`` and ``hibernate``. An agent may set only the states in its
``selfStates`` (default all three); ``selfStates = []`` forbids it (the gateway answers 403, and
``state`` exits 126).
"""

from __future__ import annotations

from typing import Any

from llamaherd.skills.base import MAX_REASON, CoreSkill, capped, obj, refuse
from llamaherd.types import Tool

PREAMBLE = """\
Agent state (also `state [idle|hibernate|off]` and `al-state STATE [REASON]` in the shell):
- set_state(state, reason): say your work is complete and how you want to be woken next. \
"idle": every trigger runs you again; "hibernate": only your schedule does (webhooks, calls \
and manual runs for you are refused); "off": nothing runs you until your owner turns you on. \
"off" ends this run at once; "idle" and "hibernate" end it when this turn's tool calls are \
done."""

SELF_STATES = ("idle", "hibernate", "off")


def allowed_states(agent: Any) -> list[str]:
    """The states ``agent`` may set itself (its ``selfStates``, default all three)."""
    return list(agent.config.get("selfStates", SELF_STATES))


def _check(ctx: Any, args: dict[str, Any]) -> tuple[str, str] | dict[str, Any]:
    """(state, reason) asked for, or a refusal (403 when the agent may not set it)."""
    state = str(args.get("state", ""))
    if state not in SELF_STATES:
        raise ValueError(f"state must be one of {', '.join(SELF_STATES)}, got {state!r}")
    allowed = allowed_states(ctx.agent)
    if state not in allowed:
        may = ", ".join(allowed) if allowed else "none"
        return refuse(
            f"agent {ctx.agent.name!r} may not set its state to {state} "
            f"(selfStates in {ctx.project.relative(ctx.agent.config_file)}: {may})",
            forbidden=True,
        )
    reason = capped("the reason", str(args.get("reason") or "no reason given"), MAX_REASON)
    return state, ctx.redact(reason).strip()


def apply_state(ctx: Any, state: str, reason: str) -> dict[str, Any]:
    """Set the agent's state as its run ``ctx`` asked; mark the run to end on it."""
    from llamaherd.agents import set_agent_state

    cause = f"set by its run {ctx.run_id}: {reason}"
    # Past the run's write budget the state is still set, without its agent event.
    history = ctx.within_budget(len(cause.encode("utf-8", "surrogatepass")))
    # The calling run is spared when the agent goes off: it ends by itself (the session).
    answer = set_agent_state(
        ctx.engine, ctx.agent.name, state, cause, spare=ctx.run_id, history=history
    )
    ctx.state_change = state
    ctx.log("agent_state", {"state": state, "reason": reason, "dropped": answer["dropped"]})
    ends = "now" if state == "off" else "when this turn's tool calls are done"
    return {"ok": True, **answer, "run": f"this run ends {ends}"}


def set_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    checked = _check(ctx, args)
    return checked if isinstance(checked, dict) else apply_state(ctx, *checked)


def request_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """``state STATE``: applied when the tool call or hook command running it ends."""
    checked = _check(ctx, args)
    if isinstance(checked, dict):
        return checked
    state, reason = checked
    ctx.after_call[:] = [lambda: apply_state(ctx, state, reason)]  # the last request wins
    return {"ok": True, "state": state, "note": "takes effect when this command ends"}


def current_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Bare ``state``: the agent's stored state and what it may set."""
    return {
        "ok": True,
        "state": ctx.store.agent_state(ctx.agent.name),
        "may_set": allowed_states(ctx.agent),
    }


SKILL = CoreSkill(
    name="states",
    category="states",
    text=PREAMBLE,
    tools=[
        Tool(
            "set_state",
            'Your work is complete: "idle", "hibernate" (schedule only) or "off" (nothing '
            "runs you). Ends this run.",
            obj(
                {
                    "state": {"type": "string", "enum": list(SELF_STATES)},
                    "reason": {"type": "string"},
                },
                ("state",),
            ),
            set_state,
        ),
    ],
)

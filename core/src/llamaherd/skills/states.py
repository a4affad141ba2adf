"""States: an agent quiets itself (hibernate) or switches itself off when its work is over."""

from __future__ import annotations

from typing import Any

from llamaherd.skills.base import CoreSkill, obj
from llamaherd.types import Tool

PREAMBLE = """\
Agent state (also `al-state hibernate|off [REASON]`):
- set_state(state, reason): "hibernate" makes only your schedule start runs (webhooks and calls \
for you are refused); "off" stops every trigger and kills your other runs. This run finishes \
either way; only your owner wakes you again. Use it when your work is over for good."""

SELF_STATES = ("hibernate", "off")


def set_state(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    from llamaherd.agents import set_agent_state

    state = str(args.get("state", ""))
    if state not in SELF_STATES:
        raise ValueError(f"state must be one of {', '.join(SELF_STATES)}, got {state!r}")
    reason = ctx.redact(str(args.get("reason") or "no reason given")).strip()
    cause = f"set by its run {ctx.run_id}: {reason}"
    # The calling run is spared: it switched its agent off and finishes what it is doing.
    answer = set_agent_state(ctx.engine, ctx.agent.name, state, cause, spare=ctx.run_id)
    ctx.log("agent_state", {"state": state, "reason": reason, "dropped": answer["dropped"]})
    return {"ok": True, **answer}


SKILL = CoreSkill(
    name="states",
    category="states",
    text=PREAMBLE,
    tools=[
        Tool(
            "set_state",
            'Put your agent in "hibernate" (schedule only) or "off" (nothing fires).',
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

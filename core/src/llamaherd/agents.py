"""What can be done to an agent: queue a manual run, change its state, answer a suspension.

Domain operations, shared by the CLI, the control API, the dashboard, the runner and the
language skills, so each rule lives once. ``engine`` is the running Engine (or a foreground one).
"""

from __future__ import annotations

from typing import Any

from llamaherd.status import SETTABLE_STATES, agent_rows
from llamaherd.types import LlamaherdError, TriggerEvent

SUSPEND_TIMEOUT = 1200.0  # seconds a suspended run waits for `al approve` (agent `suspendTimeout`)
SUSPENSION = "suspension"  # wait-filter type of a run paused at its turn limit (no trigger matches)


def manual_event(agent: str, payload: dict[str, Any] | None) -> TriggerEvent:
    """A run by hand; its prompt block is the manual trigger type's (``llamaherd.triggers``)."""
    return TriggerEvent(agent=agent, kind="manual", payload=payload or {})


def queue_manual(
    engine: Any,
    agent: str,
    payload: dict[str, Any] | None,
    count: int = 1,
    cause: str = "manual run",
) -> list[dict[str, Any]]:
    """Queue ``count`` manual runs of ``agent``; ``engine.emit``'s result for each.

    A manual run is how an owner recovers an agent in ``error``, so it first sets it ``idle``.
    """
    if engine.store.agent_state(agent) == "error":
        engine.store.set_agent_state(agent, "idle", cause)
    return [engine.emit(manual_event(agent, payload)) for _ in range(count)]


def is_suspended(row: Any) -> bool:
    """Whether a run is parked at its turn limit (waiting for `al approve` / `al deny`)."""
    return row.state == "waiting" and (row.wait_filter or {}).get("type") == SUSPENSION


def suspend_timeout(row: Any) -> float:
    """The ``suspendTimeout`` a suspended run was given."""
    return float((row.wait_filter or {}).get("timeout", SUSPEND_TIMEOUT))


def set_agent_state(
    engine: Any, agent: str, state: str, cause: str, spare: str | None = None
) -> dict[str, Any]:
    """Move ``agent`` to ``state`` (recorded with ``cause``) and apply what the state means.

    ``off`` kills the agent's live runs at once (but ``spare``, the run that switched its own
    agent off and finishes its turn) and clears its queue; ``hibernate`` drops the queued items
    of every trigger kind that does not run while hibernating (``while_hibernating``), resumes
    of waiting runs kept. The drop is recorded as one ``trigger.dropped`` agent event with the
    count. Returns {"agent", "state", "previous", "killed", "dropped"}.
    """
    if state not in SETTABLE_STATES:
        raise LlamaherdError(f"state: expected one of {', '.join(SETTABLE_STATES)}, got {state!r}")
    engine.project.agent(agent)  # unknown agent: one line with the known names
    store = engine.store
    previous = store.agent_state(agent)
    store.set_agent_state(agent, state, cause)
    dropped = 0
    if state in ("hibernate", "off"):
        why = f"dropped: agent {agent!r} went {state} ({cause})"
        keep = {*engine.hibernating_kinds(), "resume"} if state == "hibernate" else set()
        dropped = store.clear_queue(agent, why, keep=keep)
        if dropped:
            data = {"count": dropped, "state": state, "cause": cause}
            store.add_agent_event(agent, "trigger.dropped", data)
    killed = []
    if state == "off":  # after the queue is cleared, so a run claimed meanwhile is listed too
        live = store.runs(agent=agent, states=("running", "waiting"), limit=10_000)
        reason = f"agent switched off: {cause}"
        killed = [r.id for r in live if r.id != spare and engine.kill(r.id, reason=reason)]
    engine.wakeup.set()  # an agent back to idle may claim its held items
    return {
        "agent": agent,
        "state": state,
        "previous": previous,
        "killed": killed,
        "dropped": dropped,
    }


def suspended_run(engine: Any, target: str) -> Any:
    """The run ``target`` names (id or unique prefix) if it is paused at its turn limit."""
    run_row = engine.store.find_run(target)
    if run_row is None:
        raise LlamaherdError(f"no such run {target!r} (see `al runs`)")
    if not is_suspended(run_row):
        raise LlamaherdError(f"run {run_row.id} is not suspended (it is {run_row.state})")
    return run_row


def answer_suspension(engine: Any, target: str, approve: bool, cause: str) -> dict[str, Any]:
    """Approve (resume with a renewed turn budget) or deny (kill; the agent goes ``off``)."""
    run_row = suspended_run(engine, target)
    if not approve:  # switching the agent off kills the run
        why = f"suspension of run {run_row.id} denied: {cause}"
        set_agent_state(engine, run_row.agent, "off", why)
        return {"run": run_row.id, "approved": False}
    # Idle first: a suspended agent is held, and the resume item must be claimable. A state
    # the owner set since the suspension (hibernate) stands.
    if engine.store.agent_state(run_row.agent) == "suspended":
        why = f"suspension of run {run_row.id} approved: {cause}"
        engine.store.set_agent_state(run_row.agent, "idle", why)
    engine.store.resume_waiting(
        run_row.id, {"result": "approved: your turn budget is renewed", "approved": True}
    )
    engine.wakeup.set()
    return {"run": run_row.id, "approved": True}


def state_of(engine: Any, agent: str) -> dict[str, Any]:
    """The agent's stored state, the derived one (``active``...) and why it was last set."""
    engine.project.agent(agent)
    row = next(
        r
        for r in agent_rows(engine.project, engine.store, engine.registry, engine.clock())
        if r["agent"] == agent
    )
    changes = [e for e in engine.store.agent_events(agent, limit=200) if e["type"] == "state"]
    last = changes[-1] if changes else None
    return {
        "agent": agent,
        "state": row["stored_state"],
        "shown": row["state"],
        "cause": last["data"].get("cause") if last else None,
        "since": last["at"] if last else None,
    }

"""What can be done to an agent and its runs: queue a manual run or a chat, change its state,
answer a suspension, reply or say something to a run.

Domain operations, shared by the CLI, the control API, the dashboard, the runner and the
language skills, so each rule lives once. ``engine`` is the running Engine (or a foreground one).
"""

from __future__ import annotations

from typing import Any

from llamaherd.errors import Conflict, LlamaherdError
from llamaherd.prompts import CHAT_SOURCE
from llamaherd.session import HUMAN, interruption
from llamaherd.status import OWNER_STATES, SETTABLE_STATES, agent_rows
from llamaherd.types import EmitResult, TriggerEvent

SUSPEND_TIMEOUT = 1200.0  # seconds a suspended run waits for `al approve` (agent `suspendTimeout`)
SUSPENSION = "suspension"  # wait-filter type of a run paused at its turn limit (no trigger matches)


def manual_event(
    agent: str, payload: dict[str, Any] | None, source: str | None = None, prompt: str = ""
) -> TriggerEvent:
    """A run by hand; its prompt block is the manual trigger type's (``llamaherd.triggers``)
    unless ``prompt`` gives one (``al chat``)."""
    return TriggerEvent(
        agent=agent, kind="manual", payload=payload or {}, source=source, prompt=prompt
    )


def queue_manual(
    engine: Any,
    agent: str,
    payload: dict[str, Any] | None,
    count: int = 1,
    cause: str = "manual run",
    *,
    wake: bool = False,
    source: str | None = None,
    prompt: str = "",
) -> list[EmitResult]:
    """Queue ``count`` manual runs of ``agent``; ``engine.emit``'s result for each.

    A manual run is how an owner recovers an agent in ``error``, so it first sets it ``idle``.
    A hibernating or switched-off agent refuses it (``engine.gate``) unless ``wake``, which
    sets it ``idle`` first.
    """
    state = engine.store.agent_state(agent)
    if state == "error":
        engine.store.set_agent_state(agent, "idle", cause)
    elif wake and state in ("hibernate", "off"):
        engine.store.set_agent_state(agent, "idle", f"{cause}, woken from {state}")
    return [engine.emit(manual_event(agent, payload, source, prompt)) for _ in range(count)]


def trigger_answer(engine: Any, agent: str, results: list[EmitResult]) -> dict[str, Any]:
    """What ``/control/run`` answers: the queued ``items`` (None where nothing was queued),
    and, when they apply, what flow control did with each (``flow``: "debounced", "skipped:
    ...", "interrupted RUN", ...) and why the agent's queued runs are held (``held``: a
    budget..., and ``held_until`` when the hold says until when) while an item still waits."""
    answer: dict[str, Any] = {"items": [r.queued for r in results]}
    if any(r.flow for r in results):
        answer["flow"] = [r.flow for r in results]
    queued = [item for item in answer["items"] if item is not None]
    hold = engine.admission(engine.project.agent(agent)) if queued else None
    # Asked after the hold: an item claimed meanwhile was not held (its own run may be what a
    # budget's reservation now counts).
    if hold is not None and any(engine.store.item_state(i) == "queued" for i in queued):
        answer["held"] = hold.reason
        if hold.until is not None:
            answer["held_until"] = hold.until
    return answer


def queue_chat(engine: Any, agent: str, message: str, wake: bool = False) -> EmitResult:
    """``al chat``: a manual run in interactive mode whose first input is ``message``."""
    prompt = (
        "A human started a chat with you (`al chat`); you are in interactive mode. Their "
        f"first message:\n\n{message}"
    )
    results = queue_manual(
        engine, agent, {}, 1, "al chat", wake=wake, source=CHAT_SOURCE, prompt=prompt
    )
    return results[0]


def is_suspended(row: Any) -> bool:
    """Whether a run is parked at its turn limit (waiting for `al approve` / `al deny`)."""
    return row.state == "waiting" and (row.wait_filter or {}).get("type") == SUSPENSION


def suspend_timeout(row: Any) -> float:
    """The ``suspendTimeout`` a suspended run was given."""
    return float((row.wait_filter or {}).get("timeout", SUSPEND_TIMEOUT))


def set_agent_state(
    engine: Any,
    agent: str,
    state: str,
    cause: str,
    spare: str | None = None,
    history: bool = True,
) -> dict[str, Any]:
    """Move ``agent`` to ``state`` (recorded with ``cause``; as an agent event too unless not
    ``history``) and apply what the state means.

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
    store.set_agent_state(agent, state, cause, history)
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


def change_state(
    engine: Any, agent: str, state: str, cause: str, wake: bool = False
) -> dict[str, Any]:
    """Honour any state an owner may ask for (``POST /agents/:id/state``, ``al state``):
    ``idle``/``hibernate``/``off`` are set (``set_agent_state``); ``active`` means run now (a
    manual run; refused while the agent is off or hibernating unless ``wake``); ``suspended``
    means hold (triggers queue, nothing runs, until ``idle``). ``error`` and ``paused`` cannot be
    set this way: ``Conflict`` with the reason."""
    if state in SETTABLE_STATES:
        return set_agent_state(engine, agent, state, cause)
    engine.project.agent(agent)
    previous = engine.store.agent_state(agent)
    answer = {"agent": agent, "state": state, "previous": previous, "killed": [], "dropped": 0}
    if state == "active":
        result = queue_manual(engine, agent, {}, 1, cause, wake=wake)[0]
        if result.refused:
            raise Conflict(f"cannot make agent {agent!r} active: {result.refused}")
        return {**answer, "queued": result.queued}
    if state == "suspended":
        engine.store.set_agent_state(agent, "suspended", cause)
        return answer
    if state == "error":
        raise Conflict(
            f"agent {agent!r} cannot be put in error by hand: only a structural failure does "
            "that (set idle to clear it)"
        )
    if state == "paused":
        raise Conflict(
            f"paused is not an agent state: pause agent {agent!r} with `al pause {agent}` "
            "(POST /control/pause)"
        )
    raise LlamaherdError(f"state: expected one of {', '.join(OWNER_STATES)}, got {state!r}")


def find_run(engine: Any, target: str) -> Any:
    """The run ``target`` names (id or unique prefix)."""
    run_row = engine.store.find_run(target)
    if run_row is None:
        raise LlamaherdError(f"no such run {target!r} (see `al runs`)")
    return run_row


def suspended_run(engine: Any, target: str) -> Any:
    """The run ``target`` names (id or unique prefix) if it is paused at its turn limit."""
    run_row = find_run(engine, target)
    if not is_suspended(run_row):
        raise Conflict(f"run {run_row.id} is not suspended (it is {run_row.state})")
    return run_row


def human_wait(row: Any) -> str | None:
    """``ask`` or ``respond`` when the run waits for a human (interactive mode), else None."""
    wait = row.wait_filter or {}
    if row.state == "waiting" and wait.get("type") == HUMAN:
        return str(wait.get("kind") or "ask")
    return None


def reply_to_run(engine: Any, target: str, text: str, end: bool = False) -> dict[str, Any]:
    """``al reply``: answer the run's ``ask`` (the tool's result) or, after its ``respond``,
    give the human's next message; ``end`` closes the conversation (the run ends done)."""
    run_row = find_run(engine, target)
    kind = human_wait(run_row)
    if kind is None:
        raise Conflict(
            f"run {run_row.id} is not waiting for a human answer (it is {run_row.state}); "
            f"`al say {run_row.id} TEXT` talks to a running run"
        )
    if end:
        payload = {"end": True, "result": "the human ended the conversation"}
    elif kind == "ask":
        payload = {"result": text}
    else:
        payload = {"result": "delivered", "message": text}
    _resume(engine, run_row, payload)
    return {"run": run_row.id, "delivered": "end" if end else kind}


def say_to_run(engine: Any, target: str, text: str) -> dict[str, Any]:
    """``al say``: interrupt a running run (its turn is aborted, ``text`` is its next input);
    a run waiting for a human gets it as the answer, one waiting for a trigger is woken
    with it."""
    run_row = find_run(engine, target)
    if run_row.state == "running":
        if not engine.runner.interrupt(run_row.id, text):
            raise Conflict(
                f"run {run_row.id} is running in another process (host {run_row.host}): "
                "send the message through the scheduler that runs it"
            )
        return {"run": run_row.id, "delivered": "interrupt"}
    if is_suspended(run_row):
        raise Conflict(
            f"run {run_row.id} is suspended at maxTurns: answer it with `al approve` or `al deny`"
        )
    if human_wait(run_row) is not None:
        return reply_to_run(engine, run_row.id, text)
    if run_row.state != "waiting":
        raise Conflict(f"run {run_row.id} is {run_row.state}: there is nothing to talk to")
    payload = {
        "result": "wait_for_trigger ended early: a human interrupted it with a message (next)",
        "is_error": True,
        "message": interruption(text),
    }
    _resume(engine, run_row, payload)
    return {"run": run_row.id, "delivered": "interrupt"}


def _resume(engine: Any, run_row: Any, payload: dict[str, Any]) -> None:
    if not engine.store.resume_waiting(run_row.id, payload):
        raise Conflict(f"run {run_row.id} has already been resumed")
    engine.wakeup.set()


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
    # Approved: no longer on the suspendTimeout clock. The run kept its slot while suspended
    # and the dispatcher resumes it ahead of the queue (``Engine.claim``).
    engine.store.update_run(run_row.id, wait_deadline=None)
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

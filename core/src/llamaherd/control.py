"""The control API the CLI (and the dashboard) use on a running scheduler.

Reads are open on the loopback interface; every mutating call needs the control token from
``.al/control-token``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaherd.runner import is_suspended
from llamaherd.server import json_body, require_read, require_token
from llamaherd.status import SETTABLE_STATES, agent_rows, run_dict
from llamaherd.types import LlamaherdError, TriggerEvent


def _field(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """``body[key]`` checked against ``kind``; ``default`` when the key is absent."""
    if key not in body:
        return default
    value = body[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise LlamaherdError(f"{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _query_int(request: Request, key: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise LlamaherdError(f"{key}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise LlamaherdError(f"{key}: expected {low} to {high}, got {value}")
    return value


def _engine(request: Request) -> Any:
    return request.app.state.engine


@require_read
async def health(request: Request) -> Response:
    engine = _engine(request)
    return JSONResponse({"ok": True, "host": engine.host, "gateway": engine.gateway_url})


@require_read
async def stat(request: Request) -> Response:
    engine = _engine(request)
    rows = await run_in_threadpool(
        agent_rows, engine.project, engine.store, engine.registry, engine.clock()
    )
    return JSONResponse({"agents": rows})


def manual_event(agent: str, payload: dict[str, Any] | None) -> TriggerEvent:
    from llamaherd.prompts import trigger_block

    payload = payload or {}
    return TriggerEvent(
        agent=agent, kind="manual", payload=payload, prompt=trigger_block("manual", payload)
    )


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


# ------------------------------------------------------------------ agent states
# Queued trigger kinds each quiet state drops (None: every item, resumes of killed runs too).
DROPPED_KINDS: dict[str, tuple[str, ...] | None] = {"hibernate": ("webhook", "agent"), "off": None}


def set_agent_state(
    engine: Any, agent: str, state: str, cause: str, spare: str | None = None
) -> dict[str, Any]:
    """Move ``agent`` to ``state`` (recorded with ``cause``) and apply what the state means.

    ``off`` kills the agent's live runs at once (but ``spare``, the run that switched its own
    agent off and finishes its turn) and clears its queue; ``hibernate`` drops queued webhook
    and agent-call items. The drop is recorded as one ``trigger.dropped`` agent event with the
    count. Returns {"agent", "state", "previous", "killed", "dropped"}.
    """
    if state not in SETTABLE_STATES:
        raise LlamaherdError(f"state: expected one of {', '.join(SETTABLE_STATES)}, got {state!r}")
    engine.project.agent(agent)  # unknown agent: one line with the known names
    store = engine.store
    previous = store.agent_state(agent)
    store.set_agent_state(agent, state, cause)
    dropped = 0
    if state in DROPPED_KINDS:
        why = f"dropped: agent {agent!r} went {state} ({cause})"
        dropped = store.clear_queue(agent, DROPPED_KINDS[state], why)
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


@require_read
async def agent_state(request: Request) -> Response:
    engine = _engine(request)
    return JSONResponse(await run_in_threadpool(state_of, engine, request.path_params["name"]))


@require_token
async def change_agent_state(request: Request) -> Response:
    """Body {"state": "idle" | "hibernate" | "off", "cause"?: text}."""
    engine = _engine(request)
    body = await json_body(request)
    cause = str(body.get("cause") or "set through the control API")
    answer = await run_in_threadpool(
        set_agent_state, engine, request.path_params["name"], str(body.get("state", "")), cause
    )
    return JSONResponse(answer)


def _answer(approve: bool):
    @require_token
    async def endpoint(request: Request) -> Response:
        engine = _engine(request)
        body = await json_body(request) if await request.body() else {}
        cause = str(body.get("cause") or "through the control API")
        answer = await run_in_threadpool(
            answer_suspension, engine, request.path_params["run_id"], approve, cause
        )
        return JSONResponse(answer)

    endpoint.__name__ = "approve" if approve else "deny"
    return endpoint


@require_token
async def run(request: Request) -> Response:
    """Queue ``count`` manual runs of ``agent`` (default 1); answer with the item ids."""
    engine = _engine(request)
    body = await json_body(request)
    agent = _field(body, "agent", str, "")
    engine.project.agent(agent)  # unknown agent -> 400 with the known names
    count = _field(body, "count", int, 1)
    if not 1 <= count <= 10_000:
        raise LlamaherdError("count: expected 1 to 10000")

    payload = _field(body, "payload", dict, {})
    results = await run_in_threadpool(queue_manual, engine, agent, payload, count)
    refused = next((r["refused"] for r in results if r["refused"]), None)
    if refused:
        return JSONResponse({"error": refused}, status_code=409)
    return JSONResponse({"items": [r["queued"] for r in results]}, status_code=202)


@require_read
async def runs(request: Request) -> Response:
    engine = _engine(request)
    agent = request.query_params.get("agent") or None
    limit = _query_int(request, "limit", 50, 1, 10_000)
    rows = await run_in_threadpool(engine.store.runs, agent, None, limit)
    return JSONResponse({"runs": [run_dict(r) for r in rows]})


@require_read
async def run_detail(request: Request) -> Response:
    engine = _engine(request)
    found = await run_in_threadpool(engine.store.find_run, request.path_params["run_id"])
    if found is None:
        return JSONResponse(
            {"error": f"no such run {request.path_params['run_id']!r}"}, status_code=404
        )
    return JSONResponse(run_dict(found))


@require_read
async def run_events(request: Request) -> Response:
    engine = _engine(request)
    after = _query_int(request, "after", 0, 0, 2**62)
    events = await run_in_threadpool(engine.store.events, request.path_params["run_id"], after)
    return JSONResponse({"events": events})


def _targets(engine: Any, target: str) -> list[str]:
    """Run ids a kill target names: one run (id or prefix) or every live run of an agent."""
    if target in engine.project.agents:
        return [
            r.id
            for r in engine.store.runs(agent=target, states=("running", "waiting"), limit=10_000)
        ]
    found = engine.store.find_run(target)
    if found is None:
        raise LlamaherdError(f"no such run or agent {target!r}")
    return [found.id]


@require_token
async def kill(request: Request) -> Response:
    engine = _engine(request)
    body = await json_body(request)

    def kill_all() -> list[str]:
        return [
            run_id
            for run_id in _targets(engine, _field(body, "target", str, ""))
            if engine.kill(run_id)
        ]

    return JSONResponse({"killed": await run_in_threadpool(kill_all)})


def _pause(paused: bool):
    @require_token
    async def endpoint(request: Request) -> Response:
        engine = _engine(request)
        body = await json_body(request)
        agent = _field(body, "agent", str, "") or None
        if agent:
            engine.project.agent(agent)
        await run_in_threadpool(engine.store.set_paused, agent, paused)
        engine.wakeup.set()
        return JSONResponse({"paused": paused, "agent": agent})

    return endpoint


@require_token
async def stop(request: Request) -> Response:
    engine = _engine(request)
    stopper = getattr(engine, "request_stop", None)
    if stopper is None:
        return JSONResponse({"error": "not a scheduler"}, status_code=409)
    asyncio.get_running_loop().call_soon(stopper)
    return JSONResponse({"stopping": True})


ROUTES: list[tuple[str, Any, list[str]]] = [
    ("/control/health", health, ["GET"]),
    ("/control/stat", stat, ["GET"]),
    ("/control/run", run, ["POST"]),
    ("/control/runs", runs, ["GET"]),
    ("/control/runs/{run_id}", run_detail, ["GET"]),
    ("/control/runs/{run_id}/events", run_events, ["GET"]),
    ("/control/kill", kill, ["POST"]),
    ("/control/pause", _pause(True), ["POST"]),
    ("/control/resume", _pause(False), ["POST"]),
    ("/control/stop", stop, ["POST"]),
    ("/control/agents/{name}/state", agent_state, ["GET"]),
    ("/control/agents/{name}/state", change_agent_state, ["POST"]),
    ("/agents/{name}/state", change_agent_state, ["POST"]),
    ("/control/runs/{run_id}/approve", _answer(True), ["POST"]),
    ("/control/runs/{run_id}/deny", _answer(False), ["POST"]),
]

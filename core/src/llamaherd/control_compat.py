"""Action Llama's control routes, for scripts written against its gateway: a built-in plugin
(``register_routes``) beside core's control API (``llamaherd.control``).

Same paths, status codes and body shapes as Action Llama 0.29.1 (``control/routes``):

    POST /control/trigger/{name}        {prompt?}  a manual run      {success, message, instanceId}
    POST /control/agents/{name}/pause              al pause NAME     {success, message}
    POST /control/agents/{name}/resume             al resume NAME    {success, message}
    POST /control/agents/{name}/kill               al kill NAME      {success, message, killed}
    GET  /locks/status                             held locks        {locks: [...]}
    GET  /api/stats/triggers?limit&offset&since&agent&triggerType
                                                   run history       {triggers, total, limit, offset}

An unknown agent is 404 ``{"error": ...}``; a trigger the agent's state or a paused scheduler
refuses is 409. They authenticate as every control route does (``require_token``): the control
token, or Action Llama's ``gateway_api_key`` credential, as ``Authorization: Bearer``.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaherd import hookimpl
from llamaherd.auth import json_body, require_token

# Our trigger kinds and run states as Action Llama names them in its run history.
TRIGGER_TYPES = {"scheduled": "schedule"}
RESULTS = {"done": "completed", "running": "running", "waiting": "running"}
INSTANCE_WAIT = 5.0  # seconds a trigger waits for the dispatcher to start its run


def _engine(request: Request) -> Any:
    return request.app.state.engine


def _not_found(name: str) -> JSONResponse:
    return JSONResponse({"error": f"Agent {name} not found"}, status_code=404)


@require_token
async def trigger(request: Request) -> Response:
    """A manual run with the body's ``prompt`` (optional); its run id as ``instanceId``."""
    engine, name = _engine(request), request.path_params["name"]
    if name not in engine.project.agents:
        return JSONResponse({"error": f'Agent "{name}" not found'}, status_code=404)
    body = await json_body(request) if await request.body() else {}
    prompt = body.get("prompt")
    payload = {"prompt": prompt.strip()} if isinstance(prompt, str) and prompt.strip() else {}
    if (await run_in_threadpool(engine.store.paused))[0]:
        return JSONResponse({"error": "Scheduler is paused"}, status_code=409)
    from llamaherd.agents import queue_manual

    (result,) = await run_in_threadpool(queue_manual, engine, name, payload)
    if result.refused:
        return JSONResponse({"error": result.refused}, status_code=409)
    held = name in (await run_in_threadpool(engine.store.paused))[1]
    run_id = None if held else await run_in_threadpool(_started_run, engine, name, result.queued)
    return JSONResponse(
        {"success": True, "message": f"Agent {name} triggered", "instanceId": run_id}
    )


def _started_run(engine: Any, agent: str, item: int | None) -> str | None:
    """The run the dispatcher made of work item ``item``, when it does so within
    INSTANCE_WAIT (None while it waits in the queue: the agent is at its scale)."""
    deadline = time.monotonic() + INSTANCE_WAIT
    while item is not None:
        runs = engine.store.runs(agent=agent, limit=200)
        found = next((run.id for run in runs if run.item_id == item), None)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.02)
    return None


def _agent_action(verb: str):
    @require_token
    async def endpoint(request: Request) -> Response:
        engine, name = _engine(request), request.path_params["name"]
        if name not in engine.project.agents:
            return _not_found(name)
        if verb == "kill":
            live = await run_in_threadpool(engine.store.runs, name, ("running", "waiting"), 10_000)
            killed = [r.id for r in live if await run_in_threadpool(engine.kill, r.id)]
            return JSONResponse(
                {
                    "success": True,
                    "message": f"Killed {len(killed)} instance(s) of {name}",
                    "killed": len(killed),
                }
            )
        await run_in_threadpool(engine.store.set_paused, name, verb == "pause")
        engine.wakeup.set()
        return JSONResponse({"success": True, "message": f"Agent {name} {verb}d"})

    endpoint.__name__ = f"agent_{verb}"
    return endpoint


@require_token
async def locks_status(request: Request) -> Response:
    engine = _engine(request)
    held = await run_in_threadpool(engine.store.locks)
    runs = [await run_in_threadpool(engine.store.get_run, lock["holder"]) for lock in held]
    agents = {run.id: run.agent for run in runs if run is not None}
    return JSONResponse(
        {
            "locks": [
                {
                    "resourceKey": lock["uri"],
                    "agentName": agents.get(lock["holder"], lock["holder"]),
                    "holder": lock["holder"],
                    "heldSince": int(lock["acquired_at"] * 1000),
                }
                for lock in held
            ]
        }
    )


def _int(request: Request, key: str, default: int, low: int, high: int | None = None) -> int:
    """A query parameter as Action Llama reads it: a bad value is the default, then clamped."""
    try:
        value = int(request.query_params.get(key, default))
    except ValueError:
        value = default
    value = max(low, value)
    return min(high, value) if high is not None else value


@require_token
async def trigger_history(request: Request) -> Response:
    """Runs, newest first, as Action Llama's trigger history rows (times in milliseconds)."""
    engine = _engine(request)
    limit = _int(request, "limit", 50, 1, 100)
    offset = _int(request, "offset", 0, 0)
    since = _int(request, "since", 0, 0)
    wanted = request.query_params.get("triggerType") or None
    kinds = {TRIGGER_TYPES.get(kind, kind): kind for kind in ("scheduled", "manual", "webhook")}
    filters = {
        "agent": request.query_params.get("agent") or None,
        "trigger_kind": kinds.get(wanted, wanted) if wanted else None,
        "since": since / 1000 if since else None,
    }
    rows = await run_in_threadpool(
        lambda: engine.store.find_runs(**filters, limit=limit, offset=offset)
    )
    total = await run_in_threadpool(lambda: engine.store.count_runs(**filters))
    return JSONResponse(
        {
            "triggers": [_history_row(r) for r in rows],
            "total": total,
            "limit": limit,
            "offset": offset,
        }
    )


def _history_row(run: Any) -> dict[str, Any]:
    trigger = run.trigger or {}
    result = RESULTS.get(run.state, "error" if run.finished_at else "pending")
    if result == "completed" and run.rerun_requested:
        result = "rerun"
    payload = trigger.get("payload") if isinstance(trigger.get("payload"), dict) else {}
    return {
        "ts": int((run.started_at or run.created_at) * 1000),
        "instanceId": run.id,
        "agentName": run.agent,
        "triggerType": TRIGGER_TYPES.get(run.trigger_kind, run.trigger_kind),
        "triggerSource": trigger.get("source"),
        "result": result,
        "webhookReceiptId": payload.get("delivery") if run.trigger_kind == "webhook" else None,
        "deadLetterReason": None,
    }


ROUTES: list[tuple[str, Any, list[str]]] = [
    ("/control/trigger/{name}", trigger, ["POST"]),
    ("/control/agents/{name}/pause", _agent_action("pause"), ["POST"]),
    ("/control/agents/{name}/resume", _agent_action("resume"), ["POST"]),
    ("/control/agents/{name}/kill", _agent_action("kill"), ["POST"]),
    ("/locks/status", locks_status, ["GET"]),
    ("/api/stats/triggers", trigger_history, ["GET"]),
]


@hookimpl
def register_routes(app):
    from starlette.routing import Route

    app.router.routes.extend(
        Route(path, endpoint, methods=methods) for path, endpoint, methods in ROUTES
    )

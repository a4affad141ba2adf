"""The control API the CLI uses on a running scheduler: a built-in plugin (``register_routes``).

Every call, reads included, needs the control token from ``.al/control-token`` as
``Authorization: Bearer`` and a ``Host`` naming this server (``llamaherd.auth.require_token``):
run events and payloads are no business of agents or other local users. ``GET /health`` (Action Llama's liveness probe) is open from anywhere:
it says nothing but that the server is up. The operations themselves live in
``llamaherd.agents``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaherd import hookimpl
from llamaherd.auth import json_body, require_token
from llamaherd.errors import LlamaherdError
from llamaherd.status import agent_rows, database_status, run_dict, serving_status


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


def _ops() -> Any:
    """``llamaherd.agents`` (the operations), imported on the first call that needs it: a
    scheduler listens before it imports what runs agents."""
    import llamaherd.agents

    return llamaherd.agents


def _engine(request: Request) -> Any:
    return request.app.state.engine


@require_token
async def health(request: Request) -> Response:
    """The scheduler's status, and its HTTP server's request bodies in flight (``bodies``:
    how many, their bytes, the budget, how many received nothing for a second)."""
    engine = _engine(request)
    scheduler = await run_in_threadpool(serving_status, engine)
    answer = {
        "ok": True,
        "host": engine.host,
        "gateway": engine.gateway_url,
        "scheduler": scheduler,
    }
    budget = getattr(request.app.state, "body_budget", None)
    if budget is not None:
        answer["bodies"] = budget.snapshot()
    return JSONResponse(answer)


async def peer_health(request: Request) -> Response:
    """``GET /health`` as Action Llama answers it (load balancers and deploy scripts probe it):
    ``{"status": "ok"}`` without a token, since it tells nothing but that the server is up
    (and, while its agents load, how far that got: ``loading``, ``llamaherd.loading``)."""
    loading = _engine(request).loading.as_dict()
    return JSONResponse({"status": "ok", **({"loading": loading} if loading else {})})


@require_token
async def stat(request: Request) -> Response:
    """Agent rows, the scheduler, the database; while the agents load, no rows (the scheduler
    says how far it got)."""
    engine = _engine(request)
    rows = []
    if engine.loading.ready:
        rows = await run_in_threadpool(
            agent_rows, engine.project, engine.store, engine.registry, engine.clock()
        )
    scheduler = await run_in_threadpool(serving_status, engine)
    database = await run_in_threadpool(database_status, engine.project, engine.store)
    return JSONResponse(
        {"scheduler": scheduler, "agents": rows, "database": database, "now": engine.clock()}
    )


@require_token
async def agent_state(request: Request) -> Response:
    engine = _engine(request)
    return JSONResponse(
        await run_in_threadpool(_ops().state_of, engine, request.path_params["name"])
    )


@require_token
async def change_agent_state(request: Request) -> Response:
    """Body {"state": "idle" | "hibernate" | "off" | "active" | "suspended", "cause"?: text,
    "wake"?: bool}: ``active`` runs the agent now, ``suspended`` holds it; a state that cannot
    be honoured (``error``, ``paused``, ``active`` while off) is answered 409 with the reason."""
    engine = _engine(request)
    body = await json_body(request)
    cause = str(body.get("cause") or "set through the control API")
    state = _field(body, "state", str, "")
    wake = _field(body, "wake", bool, False)
    answer = await run_in_threadpool(
        _ops().change_state, engine, request.path_params["name"], state, cause, wake
    )
    return JSONResponse(answer)


def _answer(approve: bool):
    @require_token
    async def endpoint(request: Request) -> Response:
        engine = _engine(request)
        body = await json_body(request) if await request.body() else {}
        cause = str(body.get("cause") or "through the control API")
        answer = await run_in_threadpool(
            _ops().answer_suspension, engine, request.path_params["run_id"], approve, cause
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
    reload = getattr(engine, "reload", None)
    if agent not in engine.project.agents and reload is not None:
        await run_in_threadpool(reload)  # saved a moment ago: the watcher may not have looked yet
    engine.project.agent(agent)  # unknown agent -> 400 with the known names
    count = _field(body, "count", int, 1)
    if not 1 <= count <= 10_000:
        raise LlamaherdError("count: expected 1 to 10000")

    payload = _field(body, "payload", dict, {})
    wake = _field(body, "wake", bool, False)
    chat = _field(body, "chat", str, None)  # `al chat`: the human's first message
    if chat is not None:
        results = [await run_in_threadpool(_ops().queue_chat, engine, agent, chat, wake)]
    else:
        results = await run_in_threadpool(
            lambda: _ops().queue_manual(engine, agent, payload, count, wake=wake)
        )
    refused = next((r.refused for r in results if r.refused), None)
    if refused:
        return JSONResponse({"error": refused}, status_code=409)
    answer = await run_in_threadpool(_ops().trigger_answer, engine, agent, results)
    # `al run --no-follow`: the run's id once it started, within that many seconds (it is
    # claimed when queued unless its agent must wait), so the CLI needs nothing else.
    within = _field(body, "started_within", int, 0)
    if not 0 <= within <= 30:
        raise LlamaherdError("started_within: expected 0 to 30 (seconds)")
    items = answer["items"]
    if within and len(items) == 1 and items[0] is not None and "held_until" not in answer:
        answer["runs"] = [await run_in_threadpool(engine.started, items[0], within)]
    return JSONResponse(answer, status_code=202 if any(i is not None for i in items) else 200)


@require_token
async def runs(request: Request) -> Response:
    engine = _engine(request)
    agent = request.query_params.get("agent") or None
    limit = _query_int(request, "limit", 50, 1, 10_000)
    rows = await run_in_threadpool(engine.store.runs, agent, None, limit)
    not_run = await run_in_threadpool(engine.store.not_run, agent, limit)
    return JSONResponse({"runs": [run_dict(r) for r in rows], "not_run": not_run})


@require_token
async def run_detail(request: Request) -> Response:
    engine = _engine(request)
    found = await run_in_threadpool(engine.store.find_run, request.path_params["run_id"])
    if found is None:
        return JSONResponse(
            {"error": f"no such run {request.path_params['run_id']!r}"}, status_code=404
        )
    return JSONResponse(run_dict(found))


@require_token
async def run_events(request: Request) -> Response:
    engine = _engine(request)
    after = _query_int(request, "after", 0, 0, 2**62)
    events = await run_in_threadpool(engine.store.events, request.path_params["run_id"], after)
    return JSONResponse({"events": events})


@require_token
async def stats(request: Request) -> Response:
    """Run history (``Store.stats``): ``?agent=NAME`` and ``?since=EPOCH_SECONDS``."""
    engine = _engine(request)
    agent = request.query_params.get("agent") or None
    if agent:
        engine.project.agent(agent)
    raw = request.query_params.get("since", "0")
    try:
        since = float(raw)
    except ValueError:
        raise LlamaherdError(f"since: expected epoch seconds, got {raw!r}") from None
    return JSONResponse(await run_in_threadpool(engine.store.stats, agent, since))


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


def _talk(reply: bool):
    """``al reply`` (body {"text", "end"?}) or ``al say`` (body {"text"}) to a run."""

    @require_token
    async def endpoint(request: Request) -> Response:
        engine = _engine(request)
        body = await json_body(request)
        text = _field(body, "text", str, "")
        end = _field(body, "end", bool, False)
        if not text.strip() and not end:
            raise LlamaherdError("text: expected a non-empty message")
        run_id = request.path_params["run_id"]
        if reply:
            answer = await run_in_threadpool(_ops().reply_to_run, engine, run_id, text, end)
        else:
            answer = await run_in_threadpool(_ops().say_to_run, engine, run_id, text)
        return JSONResponse(answer)

    endpoint.__name__ = "reply" if reply else "say"
    return endpoint


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
async def wake(request: Request) -> Response:
    """Another process (``al webhooks replay --run``) queued work in the database: look now."""
    _engine(request).wakeup.set()
    return JSONResponse({"woken": True})


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
    ("/health", peer_health, ["GET"]),
    ("/control/stat", stat, ["GET"]),
    ("/control/run", run, ["POST"]),
    ("/control/runs", runs, ["GET"]),
    ("/control/runs/{run_id}", run_detail, ["GET"]),
    ("/control/runs/{run_id}/events", run_events, ["GET"]),
    ("/control/stats", stats, ["GET"]),
    ("/control/kill", kill, ["POST"]),
    ("/control/pause", _pause(True), ["POST"]),
    ("/control/resume", _pause(False), ["POST"]),
    ("/control/stop", stop, ["POST"]),
    ("/control/wake", wake, ["POST"]),
    ("/control/agents/{name}/state", agent_state, ["GET"]),
    ("/control/agents/{name}/state", change_agent_state, ["POST"]),
    ("/agents/{name}/state", change_agent_state, ["POST"]),
    ("/control/runs/{run_id}/approve", _answer(True), ["POST"]),
    ("/control/runs/{run_id}/deny", _answer(False), ["POST"]),
    ("/control/runs/{run_id}/reply", _talk(True), ["POST"]),
    ("/control/runs/{run_id}/say", _talk(False), ["POST"]),
]


@hookimpl
def register_routes(app):
    from starlette.routing import Route

    app.router.routes.extend(
        Route(path, endpoint, methods=methods) for path, endpoint, methods in ROUTES
    )

"""The gateway API: HTTP routes the in-sandbox commands call with their run's token.

Every request names its run (``X-AL-Run-Id``, from ``$AL_RUN_ID``) and proves it with
``Authorization: Bearer $AL_RUN_TOKEN``; the token's sha256 is compared in constant time with the
run's stored hash. A run acts only as itself: another run's token gets 403. Each endpoint calls
the same language-skill handler the model's tool call uses, so there is one implementation.

JSON in, JSON out (``{"ok": true, ...}``; refusals ``{"ok": false, "error": ...}`` with 409, or
403 for another run's lock, 400 for bad input):

    POST /gateway/status {text}            al-status        set_status
    POST /gateway/return {value}           al-return        return_value
    POST /gateway/rerun  {}                al-rerun         rerun
    POST /gateway/call   {agent, context}  al-subagent      call_agent -> {call_id}
    GET  /gateway/call/{call_id}           al-subagent-check / -wait    check_call
    POST /gateway/lock   {uri}             rlock            acquire_lock -> ok | holder
    POST /gateway/unlock {uri}             runlock          release_lock
    POST /gateway/lock-heartbeat {uri?}    rlock-heartbeat  heartbeat_lock
    POST /gateway/state  {state, reason?}  al-state         set_state (idle | hibernate | off)
    GET  /gateway/agent-state              state            the agent's state
    POST /gateway/agent-state {state, reason?}  state STATE  set when the command's tool call ends
    GET  /gateway/events?limit&level&run   al-events        recent_events (this agent's runs)
    POST /gateway/setenv {name, value}     setenv           env for the model's later bash calls
    POST /gateway/wait   {filter, timeout} al-wait          blocks until a matching trigger (408)

A state the agent may not set (``selfStates``) is refused with 403. The run's credentials are
checked before its body is read. Each route takes a body of what its arguments may hold at most
(``BODY_LIMITS``, enforced by ``llamaherd.http_guard`` with the run's share of the bodies in
flight): a larger one is answered 413 before it is read.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llamaherd import hookimpl
from llamaherd.errors import LlamaherdError

if TYPE_CHECKING:  # starlette and asyncio load only with the server, not on every `al` call
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

ACTIVE_STATES = ("running", "waiting")
WAIT_POLL = 0.1  # seconds between checks of a blocked al-wait
FIELDS = 2048  # bytes of a body besides its long argument: keys, short fields, JSON syntax


def text_body(characters: int) -> int:
    """Bytes of a body carrying text of ``characters`` (UTF-8, as the in-sandbox commands
    send it: at most 4 bytes each)."""
    return 4 * characters + FIELDS


def setenv_body(_path: str) -> int:
    """What ``/gateway/setenv`` takes: a value at its cap, each byte escaped into at most two
    (quotes, backslashes, line breaks). Asked with the first such request: the session's
    module, which holds the cap, is not imported before a scheduler listens."""
    from llamaherd.session import MAX_ENV_VALUE

    return 2 * MAX_ENV_VALUE + FIELDS


def body_limits() -> dict[str, int | Callable[[str], int]]:
    """What each route's body may hold (``app.state.body_limits``): its arguments at their
    caps. Any other ``/gateway/`` route takes ``http_guard.BODY_LIMITS["/gateway/"]``."""
    from llamaherd.skills.base import (
        MAX_CALL_CONTEXT,
        MAX_LOCK_URI,
        MAX_REASON,
        MAX_RETURN,
        MAX_STATUS,
    )

    return {
        "/gateway/status": text_body(MAX_STATUS),
        "/gateway/return": MAX_RETURN + FIELDS,  # its cap counts the value as ASCII JSON
        "/gateway/call": text_body(MAX_CALL_CONTEXT),
        "/gateway/lock": text_body(MAX_LOCK_URI),
        "/gateway/unlock": text_body(MAX_LOCK_URI),
        "/gateway/lock-heartbeat": text_body(MAX_LOCK_URI),
        "/gateway/state": text_body(MAX_REASON),
        "/gateway/agent-state": text_body(MAX_REASON),
        "/gateway/setenv": setenv_body,
    }


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse({"ok": False, "error": message, **extra}, status_code=status)


def authenticate(engine: Any, request: Request) -> Any:
    """The ActiveRun of the request's run, or a JSONResponse refusing it (401/403/409)."""
    from llamaherd.runner import token_hash
    from llamaherd.session import ActiveRun

    auth = request.headers.get("authorization", "")
    token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    run_id = request.headers.get("x-al-run-id", "")
    if not token or not run_id:
        return _error(401, "missing run credentials (Authorization: Bearer and X-AL-Run-Id)")
    row = engine.store.get_run(run_id)
    digest = token_hash(token)
    if row is None or not row.token_hash or not hmac.compare_digest(digest, row.token_hash):
        return _error(403, "this token does not belong to that run")
    if row.state not in ACTIVE_STATES:
        return _error(409, f"run {run_id} is {row.state}")
    live = engine.runner.live(run_id)
    if live is not None:
        return live.ctx
    agent = engine.project.agents.get(row.agent)
    if agent is None:
        return _error(409, f"agent {row.agent!r} no longer exists")
    return ActiveRun(run_id, agent, engine, engine.store, trigger=row.trigger or {})


async def _body(request: Request) -> dict[str, Any]:
    """The JSON object of the body ({} without one), made valid and within the shape limits
    (``llamaherd.inbound``: an agent's "\ud800" or NaN would break every listing showing
    it); ValueError when it is none."""
    from llamaherd.inbound import parse

    raw = await request.body()
    if not raw.strip():
        return {}
    data = parse(raw)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def skill_endpoint(tool_name: str, args_from_path: str | None = None) -> Any:
    """An endpoint that authenticates, then calls the language-skill tool ``tool_name``."""

    def handler(engine: Any, ctx: Any) -> Any:
        tool = engine.registry.tools().get(tool_name)
        return tool.handler if tool is not None else None

    return handler_endpoint(f"gateway_{tool_name}", handler, tool_name, args_from_path)


Handler = Callable[[Any, dict[str, Any]], Any]  # (RunContext, arguments) -> JSON-able answer


def handler_endpoint(
    name: str,
    pick: Callable[[Any, Any], Handler | None],
    what: str,
    args_from_path: str | None = None,
) -> Any:
    """An endpoint that authenticates, then calls ``pick(engine, ctx)(ctx, args)``, where the
    arguments are the JSON body (a GET's query parameters)."""

    async def endpoint(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        engine = request.app.state.engine
        ctx = await run_in_threadpool(authenticate, engine, request)  # before reading the body
        if isinstance(ctx, Response):
            return ctx
        try:
            args = await _body(request) if request.method != "GET" else dict(request.query_params)
        except ValueError as exc:
            return _error(400, f"bad JSON body: {exc}")
        if args_from_path:
            args[args_from_path] = request.path_params[args_from_path]
        handler = pick(engine, ctx)
        if handler is None:
            return _error(404, f"no language skill provides {what!r}")
        try:
            result = await run_in_threadpool(handler, ctx, args)
        except (ValueError, TypeError, KeyError) as exc:
            return _error(400, str(exc))
        return _answer(result)

    endpoint.__name__ = name
    return endpoint


def _state_handler(engine: Any, ctx: Any) -> Any:
    """``state STATE``: deferred to the end of the running tool call when the run's session
    is in this process; else (nothing here would apply it) at once."""
    from llamaherd.skills.states import request_state, set_state

    return request_state if engine.runner.live(ctx.run_id) is not None else set_state


def _answer(result: Any) -> JSONResponse:
    from starlette.responses import JSONResponse

    if isinstance(result, dict) and result.get("ok") is False:
        status = 403 if result.pop("forbidden", False) else 409
        return JSONResponse(result, status_code=status)
    return JSONResponse(result if isinstance(result, dict) else {"ok": True, "result": result})


async def setenv(request: Request) -> Response:
    """``setenv NAME VALUE`` from a hook or script: applies to the model's later bash calls."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response

    engine = request.app.state.engine
    ctx = await run_in_threadpool(authenticate, engine, request)
    if isinstance(ctx, Response):
        return ctx
    try:
        args = await _body(request)
        engine.runner.setenv(ctx.run_id, str(args["name"]), str(args.get("value", "")))
    except (ValueError, KeyError) as exc:
        return _error(400, f"setenv: {exc}")
    except LlamaherdError as exc:  # over the run's setenv limits: the message names the limit
        return _error(413, str(exc))
    except LookupError as exc:
        return _error(409, str(exc))
    return JSONResponse({"ok": True, "note": "applies to the agent's later bash tool calls"})


async def wait(request: Request) -> Response:
    """``al-wait FILTER [TIMEOUT]``: block until a matching trigger arrives, answer it.

    Unlike the model's ``wait_for_trigger`` the run keeps running (a script is blocked in it),
    so the wait is held in memory for the life of this request.
    """
    import asyncio

    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, Response

    from llamaherd.skills.wait import check_filter, wait_timeout
    from llamaherd.waits import SCRIPT_WAITS

    engine = request.app.state.engine
    ctx = await run_in_threadpool(authenticate, engine, request)
    if isinstance(ctx, Response):
        return ctx
    try:
        args = await _body(request)
        wait_filter = check_filter(args.get("filter"))
        seconds = wait_timeout(ctx, args.get("timeout"))
    except (ValueError, LlamaherdError) as exc:
        return _error(400, str(exc))
    pending = SCRIPT_WAITS.add(ctx.run_id, ctx.agent.name, wait_filter)
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        # The wait also ends when al-wait goes away (killed, its timeout): no event for it then.
        while not pending.done.is_set() and asyncio.get_running_loop().time() < deadline:
            if await request.is_disconnected():
                break
            await asyncio.sleep(WAIT_POLL)
    finally:
        SCRIPT_WAITS.remove(pending)
    if pending.ended:
        return _error(410, f"al-wait: {pending.ended}")
    if not pending.done.is_set():
        return _error(408, f"no trigger matching {wait_filter} within {seconds:g} s")
    return JSONResponse({"ok": True, "trigger": pending.result})


ROUTES = [
    ("/gateway/status", "set_status", None, "POST"),
    ("/gateway/return", "return_value", None, "POST"),
    ("/gateway/rerun", "rerun", None, "POST"),
    ("/gateway/call", "call_agent", None, "POST"),
    ("/gateway/call/{call_id}", "check_call", "call_id", "GET"),
    ("/gateway/lock", "acquire_lock", None, "POST"),
    ("/gateway/unlock", "release_lock", None, "POST"),
    ("/gateway/lock-heartbeat", "heartbeat_lock", None, "POST"),
    ("/gateway/state", "set_state", None, "POST"),
    ("/gateway/events", "recent_events", None, "GET"),
]


@hookimpl
def register_routes(app):
    from starlette.routing import Route

    routes = [
        Route(path, skill_endpoint(tool, param), methods=[method])
        for path, tool, param, method in ROUTES
    ]
    from llamaherd.skills.states import current_state

    routes += [
        Route(
            "/gateway/agent-state",
            handler_endpoint("gateway_state", lambda *_: current_state, "state"),
            methods=["GET"],
        ),
        Route(
            "/gateway/agent-state",
            handler_endpoint("gateway_request_state", _state_handler, "state"),
            methods=["POST"],
        ),
    ]
    routes.append(Route("/gateway/setenv", setenv, methods=["POST"]))
    routes.append(Route("/gateway/wait", wait, methods=["POST"]))
    app.router.routes.extend(routes)
    app.state.body_limits.update(body_limits())

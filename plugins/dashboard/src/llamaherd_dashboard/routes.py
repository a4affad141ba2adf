"""The dashboard's pages, its JSON API under ``/api/`` and the run log stream (server-sent events).

See ``auth`` for who may read and change what.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from llamaherd.api import FINAL, ago, until
from llamaherd_dashboard import auth, views

Handler = Callable[[Request], Awaitable[Response]]

REFRESH_HEADER = "x-dashboard-refresh"  # sent by dashboard.js when it refreshes a page's live parts
MISDIRECTED = "this server does not answer to that host name (see [gateway] url and bind)"
STREAM_POLL = 0.2  # seconds between looks at the database for new run events
STREAM_KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing

# No framing (the Run and Kill buttons must not be clickjacked), no inline or foreign scripts.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("llamaherd_dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _clock(when: float | None) -> str:
    return "-" if when is None else time.strftime("%H:%M:%S", time.gmtime(when))


def _stamp(when: float | None) -> str:
    return "-" if when is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}s" if value < 120 else f"{int(value // 60)}m {int(value % 60)}s"


TEMPLATES.filters.update(clock=_clock, stamp=_stamp, ago=ago, until=until, seconds=_seconds)
TEMPLATES.filters["json"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
TEMPLATES.globals["badge"] = views.badge


def _engine(request: Request) -> Any:
    return request.app.state.engine


def _wants_form_reply(request: Request) -> bool:
    return request.headers.get("content-type", "").startswith(auth.FORM_TYPE)


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A page, with the session cookie (set when new) its CSRF token is bound to."""
    session = auth.session_of(request)
    fresh = session is None
    session = session or auth.new_session()
    csrf = auth.csrf_token(request, session)
    html = TEMPLATES.get_template(template).render(
        csrf=csrf,
        csrf_field=Markup(f'<input type="hidden" name="{auth.CSRF_FIELD}" value="{csrf}">'),
        reader=auth.may_read(request),
        signed_in=auth.signed_in(request),
        path=request.url.path,
        **context,
    )
    response = HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)
    if fresh:
        auth.set_session_cookie(request, response, session)
    return response


def not_found(request: Request, what: str) -> Response:
    return render(request, "error.html", status_code=404, title="Not found", message=what)


def failed(request: Request, status: int, reason: str) -> Response:
    """A refused or failed POST: an error page for a form, else JSON."""
    if _wants_form_reply(request):
        return render(request, "error.html", status_code=status, title="Refused", message=reason)
    return JSONResponse({"error": reason}, status_code=status)


# ---------------------------------------------------------------------- access wrappers
def page(handler: Handler) -> Handler:
    """A page: for a signed-in browser (or the bearer token), else the sign-in page."""

    async def wrapper(request: Request) -> Response:
        if not auth.allowed_host(request):
            return PlainTextResponse(MISDIRECTED, status_code=421)
        if not auth.may_read(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


def api(handler: Handler) -> Handler:
    """A JSON read endpoint: for a signed-in browser (or the bearer token), else 401."""

    async def wrapper(request: Request) -> Response:
        if not auth.may_read(request):
            return JSONResponse({"error": "sign in required"}, status_code=401)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


def mutation(handler: Handler) -> Handler:
    """A POST that changes something: see ``auth.mutation_refusal``."""

    async def wrapper(request: Request) -> Response:
        refused = await auth.mutation_refusal(request)
        if refused is not None:
            return failed(request, *refused)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


# ---------------------------------------------------------------------- pages
@page
async def agents_page(request: Request) -> Response:
    rows = await run_in_threadpool(views.agents, _engine(request))
    return render(request, "agents.html", agents=rows)


@page
async def agent_page(request: Request) -> Response:
    name = request.path_params["name"]
    data = await run_in_threadpool(views.agent, _engine(request), name)
    if data is None:
        return not_found(request, f"no agent named {name!r}")
    return render(request, "agent.html", agent=data, queued=request.query_params.get("queued"))


@page
async def run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    # The page's own refreshes patch only its live parts: the log (streamed) is left out.
    with_log = REFRESH_HEADER not in request.headers
    data = await run_in_threadpool(views.run, _engine(request), run_id, with_log)
    if data is None:
        return not_found(request, f"no run {run_id!r}")
    return render(request, "run.html", **{"events": [], **data})


def _safe_next(target: str) -> str:
    """Only paths on this server: never ``//host`` or a full URL (an open redirect)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


async def login_page(request: Request) -> Response:
    """GET: the form. POST: check the token or password, start a signed-in session, go on."""
    if not auth.allowed_host(request):
        return PlainTextResponse(MISDIRECTED, status_code=421)
    target = _safe_next(request.query_params.get("next", "/"))
    if request.method == "GET":
        return render(request, "login.html", next=target, error=None)
    reason = await auth.csrf_refusal(request)
    if reason is not None:
        return render(request, "login.html", status_code=403, next=target, error=reason)
    form = await auth.form_fields(request)
    if not auth.password_matches(request, form.get("token", "").strip()):
        return render(request, "login.html", status_code=401, next=target, error="wrong token")
    response = RedirectResponse(_safe_next(form.get("next", target)), status_code=303)
    auth.sign_in(request, response)
    return response


@mutation
async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    auth.sign_out(response)
    return response


# ---------------------------------------------------------------------- JSON API
async def _find_run(request: Request) -> Any:
    """The run the path names (full id or unique prefix), or None."""
    return await run_in_threadpool(_engine(request).store.find_run, request.path_params["run_id"])


def _no_run(request: Request) -> str:
    return f"no run {request.path_params['run_id']!r}"


@api
async def api_agents(request: Request) -> Response:
    return JSONResponse({"agents": await run_in_threadpool(views.agents, _engine(request))})


@api
async def api_agent(request: Request) -> Response:
    name = request.path_params["name"]
    data = await run_in_threadpool(views.agent, _engine(request), name)
    if data is None:
        return JSONResponse({"error": f"no agent named {name!r}"}, status_code=404)
    return JSONResponse(data)


@api
async def api_run(request: Request) -> Response:
    data = await run_in_threadpool(views.run, _engine(request), request.path_params["run_id"])
    if data is None:
        return JSONResponse({"error": _no_run(request)}, status_code=404)
    return JSONResponse(data)


@api
async def api_events(request: Request) -> Response:
    engine = _engine(request)
    found = await _find_run(request)
    if found is None:
        return JSONResponse({"error": _no_run(request)}, status_code=404)
    after = _int(request.query_params.get("after"))
    events = await run_in_threadpool(engine.store.events, found.id, after)
    return JSONResponse(
        {"run": found.id, "state": found.state, "events": [views.log_line(e) for e in events]}
    )


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


@api
async def api_stream(request: Request) -> Response:
    """Server-sent events: the run's events after ``Last-Event-ID`` (or ``?after=``), then each
    new one as it is recorded; an ``end`` event once the run is final."""
    engine = _engine(request)
    found = await _find_run(request)
    if found is None:
        return JSONResponse({"error": _no_run(request)}, status_code=404)
    # On a reconnect EventSource repeats the URL and says what it has in Last-Event-ID.
    after = _int(request.headers.get("last-event-id") or request.query_params.get("after"))
    return StreamingResponse(
        _stream(engine, found.id, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(engine: Any, run_id: str, after: int) -> AsyncIterator[str]:
    quiet = 0.0
    while not engine.stopping.is_set():  # on shutdown end quietly: EventSource reconnects later
        # The state is read before the events, so the events of a final run are all in this read.
        run = await run_in_threadpool(engine.store.get_run, run_id)
        events = await run_in_threadpool(engine.store.events, run_id, after)
        for event in events:
            after = event["id"]
            yield f"id: {after}\ndata: {json.dumps(views.log_line(event), default=str)}\n\n"
        if run is None or run.state in FINAL:
            state = run.state if run else "gone"
            yield f"event: end\ndata: {json.dumps({'state': state})}\n\n"
            return
        quiet = 0.0 if events else quiet + STREAM_POLL
        if quiet >= STREAM_KEEPALIVE:
            quiet = 0.0
            yield ": keepalive\n\n"
        await asyncio.sleep(STREAM_POLL)


# ---------------------------------------------------------------------- actions
@mutation
async def run_agent(request: Request) -> Response:
    """Queue a manual run; a form post is sent back to the agent's page."""
    engine = _engine(request)
    name = request.path_params["name"]
    if name not in engine.project.agents:
        return failed(request, 404, f"no agent named {name!r}")
    from llamaherd.api import queue_manual

    results = await run_in_threadpool(
        queue_manual, engine, name, {}, 1, "manual run from the dashboard"
    )
    result = results[0]
    if result.refused:
        return failed(request, 409, result.refused)
    if _wants_form_reply(request):
        return RedirectResponse(f"/agents/{quote(name)}?queued={result.queued}", status_code=303)
    return JSONResponse({"queued": result.queued}, status_code=202)


@mutation
async def kill_run(request: Request) -> Response:
    """Kill a live run; a form post is sent back to the run's page."""
    engine = _engine(request)
    found = await _find_run(request)
    if found is None:
        return failed(request, 404, _no_run(request))
    killed = await run_in_threadpool(engine.kill, found.id, "killed from the dashboard")
    if _wants_form_reply(request):
        return RedirectResponse(f"/runs/{quote(found.id)}", status_code=303)
    return JSONResponse({"run": found.id, "killed": killed})


def _suspension_answer(approve: bool) -> Handler:
    """Approve or deny a run suspended at its agent's maxTurns (see ``al approve``)."""

    @mutation
    async def endpoint(request: Request) -> Response:
        from llamaherd.api import LlamaherdError, answer_suspension

        found = await _find_run(request)
        if found is None:
            return failed(request, 404, _no_run(request))
        verb = "approve" if approve else "deny"
        try:
            answer = await run_in_threadpool(
                answer_suspension, _engine(request), found.id, approve, f"{verb} from the dashboard"
            )
        except LlamaherdError as exc:
            return failed(request, 409, str(exc))
        if _wants_form_reply(request):
            return RedirectResponse(f"/runs/{quote(found.id)}", status_code=303)
        return JSONResponse(answer)

    endpoint.__name__ = f"{'approve' if approve else 'deny'}_run"
    return endpoint


def _talk(reply: bool) -> Handler:
    """Reply to a run waiting for a human, or say something to a live run (``al reply`` /
    ``al say``); a form post is sent back to the run's page."""

    @mutation
    async def endpoint(request: Request) -> Response:
        from llamaherd.api import LlamaherdError, json_body, reply_to_run, say_to_run

        found = await _find_run(request)
        if found is None:
            return failed(request, 404, _no_run(request))
        try:  # a form (the run's page), or JSON (with the control token)
            fields = await auth.form_fields(request) or await json_body(request)
        except LlamaherdError as exc:
            return failed(request, 400, str(exc))
        text = str(fields.get("text") or "").strip()
        if not text:
            return failed(request, 400, "the message is empty")
        talk = reply_to_run if reply else say_to_run
        try:
            answer = await run_in_threadpool(talk, _engine(request), found.id, text)
        except LlamaherdError as exc:
            return failed(request, 409, str(exc))
        if _wants_form_reply(request):
            return RedirectResponse(f"/runs/{quote(found.id)}", status_code=303)
        return JSONResponse(answer)

    endpoint.__name__ = "reply_run" if reply else "say_run"
    return endpoint


async def peer_dashboard(request: Request) -> Response:
    """Action Llama serves its dashboard at /dashboard: bookmarks of it land on ours."""
    return RedirectResponse("/", status_code=308)


ROUTES = [
    Route("/", agents_page, methods=["GET"]),
    Route("/dashboard", peer_dashboard, methods=["GET"]),
    Route("/agents/{name}", agent_page, methods=["GET"]),
    Route("/runs/{run_id}", run_page, methods=["GET"]),
    Route("/login", login_page, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/api/agents", api_agents, methods=["GET"]),
    Route("/api/agents/{name}", api_agent, methods=["GET"]),
    Route("/api/agents/{name}/run", run_agent, methods=["POST"]),
    Route("/api/runs/{run_id}", api_run, methods=["GET"]),
    Route("/api/runs/{run_id}/events", api_events, methods=["GET"]),
    Route("/api/runs/{run_id}/stream", api_stream, methods=["GET"]),
    Route("/api/runs/{run_id}/kill", kill_run, methods=["POST"]),
    Route("/api/runs/{run_id}/approve", _suspension_answer(True), methods=["POST"]),
    Route("/api/runs/{run_id}/deny", _suspension_answer(False), methods=["POST"]),
    Route("/api/runs/{run_id}/reply", _talk(True), methods=["POST"]),
    Route("/api/runs/{run_id}/say", _talk(False), methods=["POST"]),
]


def add_routes(app: Any) -> None:
    """Add the dashboard to the scheduler's Starlette app."""
    static = StaticFiles(packages=[("llamaherd_dashboard", "static")])
    app.router.routes.extend(
        [*ROUTES, Mount("/static/dashboard", app=static, name="dashboard-static")]
    )

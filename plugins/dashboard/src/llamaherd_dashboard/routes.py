"""The dashboard's pages, its JSON API under ``/api/``, and the one live stream per page.

Each page is built by a *builder* (template and context from the path's parameters and query),
used both for the page itself and by ``/api/live``, the page's one server-sent-events stream:
it sends the page again (``event: page``) when the store's ``change_marker`` moved, at most
every ``LIVE_GAP`` seconds, and on a run's page each new log entry (``event: log``) as it is
recorded. The browser patches the page's ``[data-live]`` parts in place.

See ``auth`` for who may read and change what.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

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
from llamaherd_dashboard.password import MAX_FAILURES, WINDOW, start_refusal

log = logging.getLogger("llamaherd.dashboard")

Handler = Callable[[Request], Awaitable[Response]]
# A page's builder: (request, path parameters, query) -> (template, context), None for a 404.
Built = tuple[str, dict[str, Any]] | None
Builder = Callable[[Request, dict[str, str], dict[str, str]], Awaitable[Built]]

MISDIRECTED = "this server does not answer to that host name (see [gateway] url and bind)"
STREAM_POLL = 0.2  # seconds between looks at the database for new run events
STREAM_KEEPALIVE = 15.0  # seconds of silence before a comment line keeps proxies from closing
LIVE_POLL = 0.5  # seconds between looks at the store's change marker
LIVE_GAP = 1.0  # at most one page update per this many seconds
LIVE_REFRESH = 15.0  # send the page anyway after this long ("5m ago" moves on)
SIGN_IN_BODY = 16 * 1024  # bytes of the sign-in form

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
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _clock(when: float | None) -> str:
    return "-" if when is None else time.strftime("%H:%M:%S", time.gmtime(when))


def _stamp(when: float | None) -> str:
    return "-" if when is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(when))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}s" if value < 120 else f"{int(value // 60)}m {int(value % 60)}s"


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.2f}" if value >= 1 else f"${value:.4f}".rstrip("0").rstrip(".")


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{round(100 * value)}%"


@functools.cache
def templates() -> Any:
    """The pages' jinja2 environment, made for the first page served: a scheduler listens
    before it imports what draws pages."""
    import jinja2

    found = jinja2.Environment(
        loader=jinja2.PackageLoader("llamaherd_dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    found.filters.update(
        clock=_clock, stamp=_stamp, ago=ago, until=until, seconds=_seconds, usd=_usd, pct=_percent
    )
    found.globals.update(fmt_seconds=_seconds, fmt_usd=_usd)
    found.filters["json"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
    return found


def _engine(request: Request) -> Any:
    return request.app.state.engine


def _wants_form_reply(request: Request) -> bool:
    """A plain form post (answered with a redirect), not the page script's (with the CSRF
    header, answered with JSON)."""
    return (
        request.headers.get("content-type", "").startswith(auth.FORM_TYPE)
        and auth.CSRF_HEADER not in request.headers
    )


def page_html(request: Request, template: str, **context: Any) -> tuple[str, str | None]:
    """A page's HTML and the new session id it was rendered for (None when it had one)."""
    session = auth.session_of(request)
    fresh = session is None
    session = session or auth.new_session()
    csrf = auth.csrf_token(request, session)
    signed_in = auth.may_read(request)
    html = (
        templates()
        .get_template(template)
        .render(
            csrf=csrf,
            csrf_field=Markup(f'<input type="hidden" name="{auth.CSRF_FIELD}" value="{csrf}">'),
            reader=signed_in,
            signed_in=signed_in and auth.signed_in(request),
            path=request.url.path,
            scheduler=views.header(_engine(request)) if signed_in else None,
            **context,
        )
    )
    return html, session if fresh else None


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A page, with the session cookie (set when new) its CSRF token is bound to."""
    html, fresh = page_html(request, template, **context)
    response = HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)
    if fresh:
        auth.set_session_cookie(request, response, fresh)
    return response


def not_found(request: Request, what: str) -> Response:
    return render(request, "error.html", status_code=404, title="Not found", message=what)


def failed(request: Request, status: int, reason: str) -> Response:
    """A refused or failed POST: an error page for a form, else JSON."""
    if _wants_form_reply(request):
        return render(request, "error.html", status_code=status, title="Refused", message=reason)
    return JSONResponse({"error": reason}, status_code=status)


def done(request: Request, answer: dict[str, Any], back: str, status: int = 200) -> Response:
    """A POST that worked: a form is sent ``back`` to a page, a script gets ``answer``."""
    if _wants_form_reply(request):
        return RedirectResponse(back, status_code=303)
    return JSONResponse(answer, status_code=status)


# ---------------------------------------------------------------------- access wrappers
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


def page(builder: Builder) -> Handler:
    """A page: for a signed-in browser (or the bearer token), else the sign-in page."""

    async def endpoint(request: Request) -> Response:
        if not auth.allowed_host(request):
            return PlainTextResponse(MISDIRECTED, status_code=421)
        if not auth.may_read(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        built = await builder(request, request.path_params, dict(request.query_params))
        if built is None:
            return not_found(request, f"nothing at {request.url.path}")
        return render(request, built[0], **built[1])

    endpoint.__name__ = builder.__name__
    return endpoint


# ---------------------------------------------------------------------- page builders
async def overview_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    data = await run_in_threadpool(
        views.overview, _engine(request), query.get("sort", "agent"), query.get("q", "")
    )
    return "agents.html", data


async def agent_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    data = await run_in_threadpool(views.agent, _engine(request), params["name"])
    return None if data is None else ("agent.html", {"agent": data, "queued": query.get("queued")})


async def runs_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    return "runs.html", await run_in_threadpool(views.runs, _engine(request), query)


async def run_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    # The live stream re-renders the page without its conversation: that arrives entry by entry.
    with_log = not params.get("live")
    data = await run_in_threadpool(views.run, _engine(request), params["run_id"], with_log)
    if data is None:
        return None
    models = sorted(_engine(request).project.config.get("models") or {})
    return "run.html", {"events": [], "models": models, "recorded": query.get("recorded"), **data}


async def replay_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    """A replay started from a run's page: going on (the page refreshes), or its side by side."""
    replay = _replays(request).get(params["token"])
    if replay is None or replay.run_id != params["run_id"]:
        return None
    return "replay.html", {"replay": replay, "run_id": replay.run_id}


async def deliveries_page(request: Request, params: dict[str, str], query: dict[str, str]) -> Built:
    offset = int(query["offset"]) if query.get("offset", "").isdigit() else 0
    listed = await control_get(request, f"/control/deliveries?limit=50&offset={offset}")
    dead = await control_get(request, "/control/deliveries?limit=20&dead=1")
    context = {
        "installed": listed is not None,
        "deliveries": views.delivery_rows((listed or {}).get("deliveries", [])),
        "dead_letters": views.delivery_rows((dead or {}).get("deliveries", [])),
        "offset": offset,
        "replayed": query.get("replayed"),
    }
    return "deliveries.html", context


# Paths the live stream can render, with the builder of each.
PAGES: list[tuple[re.Pattern[str], Builder]] = [
    (re.compile(r"/"), overview_page),
    (re.compile(r"/runs"), runs_page),
    (re.compile(r"/runs/(?P<run_id>[^/]+)"), run_page),
    (re.compile(r"/runs/(?P<run_id>[^/]+)/replays/(?P<token>[0-9a-f]+)"), replay_page),
    (re.compile(r"/agents/(?P<name>[^/]+)"), agent_page),
    (re.compile(r"/deliveries"), deliveries_page),
]


async def control_get(request: Request, path: str) -> dict[str, Any] | None:
    """GET a control API path of this same server, in process, with the control token (the
    webhooks plugin serves deliveries there); None when nothing serves it."""
    return await _control(request, "GET", path)


async def _control(request: Request, method: str, path: str) -> dict[str, Any] | None:
    import httpx

    transport = httpx.ASGITransport(app=request.app)
    headers = {"Authorization": f"Bearer {request.app.state.control_token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.request(method, path, headers=headers)
    if response.status_code == 404 and "error" not in response.text:
        return None  # no such route: the webhooks plugin is not installed
    return {"status": response.status_code, **response.json()}


# ---------------------------------------------------------------------- sign-in
def _safe_next(target: str) -> str:
    """Only paths on this server: never ``//host`` or a full URL (an open redirect)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


async def login_page(request: Request) -> Response:
    """GET: the form. POST: check the token or password, start a signed-in session, go on.

    A client with ``MAX_FAILURES`` wrong sign-ins within ``WINDOW`` seconds (those being
    checked count), or anyone while all clients together made ``MAX_FAILURES_ALL``, is
    answered 429 with ``Retry-After`` before anything is checked; each wrong one is logged
    with the client's address, never with what was typed."""
    if not auth.allowed_host(request):
        return PlainTextResponse(MISDIRECTED, status_code=421)
    target = _safe_next(request.query_params.get("next", "/"))
    if request.method == "GET":
        return render(request, "login.html", next=target, error=None)
    reason = await auth.csrf_refusal(request)
    if reason is not None:
        return render(request, "login.html", status_code=403, next=target, error=reason)
    client = auth.client_of(request)
    with auth.throttle(request).attempt(client) as attempt:
        if attempt.wait:
            error = f"too many wrong sign-ins: try again in {attempt.wait} s"
            refused = render(request, "login.html", status_code=429, next=target, error=error)
            refused.headers["Retry-After"] = str(attempt.wait)
            return refused
        form = await auth.form_fields(request)
        given = form.get("token", "").strip()
        if not await run_in_threadpool(auth.password_matches, request, given):
            count = attempt.failed()
            log.warning(
                "dashboard: wrong sign-in from %s (%d within %g s%s)",
                client, count, WINDOW, "; it must wait now" if count >= MAX_FAILURES else "",
            )  # fmt: skip
            error = "wrong token or password"
            return render(request, "login.html", status_code=401, next=target, error=error)
        attempt.succeeded()
    response = RedirectResponse(_safe_next(form.get("next", target)), status_code=303)
    await run_in_threadpool(auth.sign_in, request, response)
    log.info("dashboard: signed in from %s", client)
    return response


@mutation
async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    await run_in_threadpool(auth.sign_out, request, response)
    return response


# ---------------------------------------------------------------------- JSON API
async def _find_run(request: Request) -> Any:
    """The run the path names (full id or unique prefix), or None."""
    return await run_in_threadpool(_engine(request).store.find_run, request.path_params["run_id"])


def _no_run(request: Request) -> str:
    return f"no run {request.path_params['run_id']!r}"


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


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
async def api_runs(request: Request) -> Response:
    data = await run_in_threadpool(views.runs, _engine(request), dict(request.query_params))
    return JSONResponse({key: data[key] for key in ("runs", "filters", "page", "more")})


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


@api
async def api_stream(request: Request) -> Response:
    """Server-sent events: the run's events after ``Last-Event-ID`` (or ``?after=``), then each
    new one as it is recorded; an ``end`` event once the run is final."""
    found = await _find_run(request)
    if found is None:
        return JSONResponse({"error": _no_run(request)}, status_code=404)
    # On a reconnect EventSource repeats the URL and says what it has in Last-Event-ID.
    after = _int(request.headers.get("last-event-id") or request.query_params.get("after"))
    return StreamingResponse(
        _stream(_engine(request), found.id, after),
        media_type="text/event-stream",
        headers=STREAM_HEADERS,
    )


async def _tail(engine: Any, run_id: str, after: int) -> tuple[Any, list[dict[str, Any]]]:
    """The run (read first, so the events of a final run are all in the same look) and its
    events after ``after``."""
    run = await run_in_threadpool(engine.store.get_run, run_id)
    return run, await run_in_threadpool(engine.store.events, run_id, after)


async def _stream(engine: Any, run_id: str, after: int) -> AsyncIterator[str]:
    quiet = 0.0
    while not engine.stopping.is_set():  # on shutdown end quietly: EventSource reconnects later
        run, events = await _tail(engine, run_id, after)
        for event in events:
            after = event["id"]
            yield f"id: {after}\ndata: {json.dumps(views.log_line(event), default=str)}\n\n"
        if run is None or run.state in FINAL:
            yield _sse("end", json.dumps({"state": run.state if run else "gone"}))
            return
        quiet = 0.0 if events else quiet + STREAM_POLL
        if quiet >= STREAM_KEEPALIVE:
            quiet = 0.0
            yield ": keepalive\n\n"
        await asyncio.sleep(STREAM_POLL)


def _sse(event: str, data: str) -> str:
    lines = "\n".join(f"data: {line}" for line in data.split("\n"))
    return f"event: {event}\n{lines}\n\n"


@api
async def api_live(request: Request) -> Response:
    """``/api/live?path=<page path and query>[&after=<log entry id>]``: the page's one stream."""
    target = urlsplit(request.query_params.get("path", "/"))
    for pattern, builder in PAGES:
        match = pattern.fullmatch(target.path)
        if match:
            params = match.groupdict()
            query = dict(parse_qsl(target.query))
            after = request.query_params.get("after")
            stream = _live(request, builder, params, query, None if after is None else _int(after))
            return StreamingResponse(stream, media_type="text/event-stream", headers=STREAM_HEADERS)
    return JSONResponse({"error": f"no live page at {target.path!r}"}, status_code=404)


async def _live(
    request: Request,
    builder: Builder,
    params: dict[str, str],
    query: dict[str, str],
    after: int | None,
) -> AsyncIterator[str]:
    """Page updates (and a run page's new log entries) until the client leaves or the
    scheduler stops; a run page's stream ends with its run (``event: end``)."""
    engine = _engine(request)
    marker, sent = None, 0.0
    run, turn = None, 0
    if after is not None and "run_id" in params:
        run = await run_in_threadpool(engine.store.find_run, params["run_id"])
        if run is not None:
            seen = await run_in_threadpool(engine.store.events, run.id)
            turn = sum(1 for e in seen if e["type"] == "model_call" and e["id"] <= after)
    # A sign-in that expires ends its streams too (checked each round: an HMAC, cheap).
    while not engine.stopping.is_set() and auth.may_read(request):
        final = False
        if run is not None:
            current, events = await _tail(engine, run.id, after or 0)
            shown, turn = views.entries(events, turn)
            for entry in shown:
                after = entry["id"]
                yield _sse("log", json.dumps({"id": after, "html": entry_html(entry)}))
            final = current is None or current.state in FINAL
        now = time.monotonic()
        latest = await run_in_threadpool(engine.store.change_marker)
        if final or now - sent >= LIVE_REFRESH or (latest != marker and now - sent >= LIVE_GAP):
            built = await builder(request, {**params, "live": "1"}, query)
            if built is None:
                return
            html, _ = page_html(request, built[0], **built[1])
            yield _sse("page", html)
            marker, sent = latest, now
        if final:
            yield _sse("end", json.dumps({"state": current.state if current else "gone"}))
            return
        await asyncio.sleep(STREAM_POLL if run is not None else LIVE_POLL)


def entry_html(entry: dict[str, Any]) -> str:
    """One conversation entry as the run page shows it (``macros.html``)."""
    return str(templates().get_template("macros.html").module.entry(entry))


# ---------------------------------------------------------------------- actions
def _agent_or_404(request: Request) -> tuple[str, Response | None]:
    name = request.path_params["name"]
    if name not in _engine(request).project.agents:
        return name, failed(request, 404, f"no agent named {name!r}")
    return name, None


@mutation
async def run_agent(request: Request) -> Response:
    """Queue a manual run; a form post is sent back to the agent's page."""
    from llamaherd.api import queue_manual

    name, missing = _agent_or_404(request)
    if missing:
        return missing
    results = await run_in_threadpool(
        queue_manual, _engine(request), name, {}, 1, "manual run from the dashboard"
    )
    result = results[0]
    if result.refused:
        return failed(request, 409, result.refused)
    answer: dict[str, Any] = {"queued": result.queued}
    paused_all, paused = await run_in_threadpool(_engine(request).store.paused)
    if paused_all or name in paused:
        what = "the scheduler is paused (Resume all)" if paused_all else f"{name} is paused"
        answer["note"] = f"queued as work item {result.queued}: {what}; it starts on resume"
    back = f"/agents/{quote(name)}?queued={result.queued}"
    return done(request, answer, back, status=202)


async def _fields(request: Request) -> dict[str, Any]:
    """A form's fields, or a JSON body's (scripts with the control token)."""
    from llamaherd.api import json_body

    return await auth.form_fields(request) or await json_body(request)


@mutation
async def set_state(request: Request) -> Response:
    """Set an agent's state (``idle``, ``hibernate`` or ``off``), as ``al state`` does. The
    state menu of a paused agent shows ``paused``: choosing ``idle`` there resumes it too (as
    its Resume button), so the menu is a way out of every state it shows."""
    from llamaherd.api import LlamaherdError, set_agent_state

    name, missing = _agent_or_404(request)
    if missing:
        return missing
    engine = _engine(request)
    try:
        state = str((await _fields(request)).get("state") or "")
        answer = await run_in_threadpool(
            set_agent_state, engine, name, state, "set from the dashboard"
        )
    except LlamaherdError as exc:
        return failed(request, 400, str(exc))
    if state == "idle" and name in (await run_in_threadpool(engine.store.paused))[1]:
        answer.update(await run_in_threadpool(_set_paused, engine, name, False))
    return done(request, answer, f"/agents/{quote(name)}")


@mutation
async def remove_queued(request: Request) -> Response:
    """Remove one queued item of an agent (its page's queue list)."""
    name, missing = _agent_or_404(request)
    if missing:
        return missing
    item = _int(request.path_params["item"])
    removed = await run_in_threadpool(
        _engine(request).store.drop_queued, item, "removed from the queue on the dashboard"
    )
    if not removed:
        return failed(request, 409, f"item {item} is no longer queued")
    return done(request, {"removed": item}, f"/agents/{quote(name)}")


def _pause(paused: bool) -> Handler:
    """Pause or resume the whole scheduler, or one agent (``/api/agents/{name}/...``, as
    ``al pause AGENT``): queued work waits, triggers still queue."""

    @mutation
    async def endpoint(request: Request) -> Response:
        engine = _engine(request)
        name, missing = _agent_or_404(request) if "name" in request.path_params else (None, None)
        if missing:
            return missing
        answer = await run_in_threadpool(_set_paused, engine, name, paused)
        back = f"/agents/{quote(name)}" if name else "/"
        return done(request, answer, back)

    endpoint.__name__ = "pause" if paused else "resume"
    return endpoint


def _set_paused(engine: Any, name: str | None, paused: bool) -> dict[str, Any]:
    """Pause or resume ``name`` (None: the scheduler) and wake the dispatcher; the answer
    says what now happens to its queued work (``note``, shown by the page)."""
    engine.store.set_paused(name, paused)
    wakeup = getattr(engine, "wakeup", None)
    if wakeup is not None:
        wakeup.set()
    who = name or "the scheduler"
    if paused:
        note = f"{who} paused: triggers still queue, nothing starts until it is resumed"
    elif name and engine.store.paused()[0]:
        note = f"{name} resumed, but the whole scheduler is paused: Resume all to start its runs"
    else:
        note = f"{who} resumed: queued runs start"
    return {"paused": paused, "agent": name, "note": note}


@mutation
async def kill_run(request: Request) -> Response:
    """Kill a live run; a form post is sent back to the run's page."""
    found = await _find_run(request)
    if found is None:
        return failed(request, 404, _no_run(request))
    killed = await run_in_threadpool(_engine(request).kill, found.id, "killed from the dashboard")
    return done(request, {"run": found.id, "killed": killed}, f"/runs/{quote(found.id)}")


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
        return done(request, answer, f"/runs/{quote(found.id)}")

    endpoint.__name__ = f"{'approve' if approve else 'deny'}_run"
    return endpoint


def _talk(reply: bool) -> Handler:
    """Reply to a run waiting for a human, or say something to a live run (``al reply`` /
    ``al say``); a form post is sent back to the run's page."""

    @mutation
    async def endpoint(request: Request) -> Response:
        from llamaherd.api import LlamaherdError, reply_to_run, say_to_run

        found = await _find_run(request)
        if found is None:
            return failed(request, 404, _no_run(request))
        try:
            text = str((await _fields(request)).get("text") or "").strip()
        except LlamaherdError as exc:
            return failed(request, 400, str(exc))
        if not text:
            return failed(request, 400, "the message is empty")
        talk = reply_to_run if reply else say_to_run
        try:
            answer = await run_in_threadpool(talk, _engine(request), found.id, text)
        except LlamaherdError as exc:
            return failed(request, 409, str(exc))
        return done(request, answer, f"/runs/{quote(found.id)}")

    endpoint.__name__ = "reply_run" if reply else "say_run"
    return endpoint


def _replays(request: Request) -> Any:
    from llamaherd_dashboard.replays import Replays

    state = request.app.state
    if getattr(state, "replays", None) is None:
        state.replays = Replays()
    return state.replays


def _replay_options(fields: dict[str, Any]) -> dict[str, Any]:
    """What the run page's Replay form asks: a model, a turn to fork after, live."""
    from llamaherd.api import LlamaherdError

    model = str(fields.get("model") or "").strip() or None
    turn = str(fields.get("from_turn") or "").strip()
    if turn and not (turn.isdigit() and 0 < int(turn) < 100_000):
        raise LlamaherdError(f"from turn: expected a turn number, got {turn[:20]!r}")
    live = str(fields.get("live") or "").lower() in ("on", "true", "1", "yes")
    return {"model": model, "from_turn": int(turn) if turn else None, "live": live}


@mutation
async def replay_run(request: Request) -> Response:
    """Replay a finished run (as ``al replay``) in the background; its page shows the side by
    side when it is done."""
    from llamaherd.api import FINAL, LlamaherdError

    found = await _find_run(request)
    if found is None:
        return failed(request, 404, _no_run(request))
    if found.state not in FINAL:
        return failed(request, 409, f"run {found.id} is {found.state}: replay it once it has ended")
    try:
        options = _replay_options(await _fields(request))
        token = _replays(request).start(_engine(request), found.id, options)
    except LlamaherdError as exc:
        return failed(request, 400, str(exc))
    except LookupError as exc:
        return failed(request, 429, str(exc))
    where = f"/runs/{quote(found.id)}/replays/{token}"
    return done(request, {"replay": token, "page": where}, where, status=202)


@api
async def api_replay(request: Request) -> Response:
    replay = _replays(request).get(request.path_params["token"])
    if replay is None:
        return JSONResponse(
            {"error": "no such replay (they are kept in memory, not stored)"}, status_code=404
        )
    answer = {
        "run": replay.run_id,
        "state": replay.state,
        "error": replay.error,
        "result": replay.result,
    }
    return JSONResponse(answer)


@mutation
async def record_run(request: Request) -> Response:
    """Save a finished run as a test case (as ``al record``), under its agent's ``tests/``."""
    from llamaherd.api import FINAL, LlamaherdError
    from llamaherd.api import record_run as record

    found = await _find_run(request)
    if found is None:
        return failed(request, 404, _no_run(request))
    if found.state not in FINAL:
        return failed(request, 409, f"run {found.id} is {found.state}: save it once it has ended")
    engine = _engine(request)
    try:
        name = str((await _fields(request)).get("name") or "").strip() or None
        written, notes = await run_in_threadpool(
            record, engine.project, engine.registry, engine.store, found.id, name
        )
    except LlamaherdError as exc:
        return failed(request, 409, str(exc))
    files = [engine.project.relative(path) for path in written]
    back = f"/runs/{quote(found.id)}?recorded={quote(files[0])}"
    return done(request, {"written": files, "notes": notes}, back, status=201)


@mutation
async def replay_delivery(request: Request) -> Response:
    """Route a recorded webhook delivery again (the webhooks plugin's control API)."""
    receipt = _int(request.path_params["receipt"])
    answer = await _control(request, "POST", f"/control/deliveries/{receipt}/replay")
    if answer is None:
        return failed(request, 404, "the webhooks plugin is not installed")
    status = answer.pop("status")
    if status >= 400:
        return failed(request, status, str(answer.get("error")))
    return done(request, answer, f"/deliveries?replayed={receipt}", status=status)


async def peer_dashboard(request: Request) -> Response:
    """Action Llama serves its dashboard at /dashboard: bookmarks of it land on ours."""
    return RedirectResponse("/", status_code=308)


ROUTES = [
    Route("/", page(overview_page), methods=["GET"]),
    Route("/dashboard", peer_dashboard, methods=["GET"]),
    Route("/agents/{name}", page(agent_page), methods=["GET"]),
    Route("/runs", page(runs_page), methods=["GET"]),
    Route("/runs/{run_id}", page(run_page), methods=["GET"]),
    Route("/runs/{run_id}/replays/{token}", page(replay_page), methods=["GET"]),
    Route("/deliveries", page(deliveries_page), methods=["GET"]),
    Route("/login", login_page, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/api/live", api_live, methods=["GET"]),
    Route("/api/agents", api_agents, methods=["GET"]),
    Route("/api/agents/{name}", api_agent, methods=["GET"]),
    Route("/api/agents/{name}/run", run_agent, methods=["POST"]),
    Route("/api/agents/{name}/state", set_state, methods=["POST"]),
    Route("/api/agents/{name}/queue/{item}/remove", remove_queued, methods=["POST"]),
    Route("/api/agents/{name}/pause", _pause(True), methods=["POST"]),
    Route("/api/agents/{name}/resume", _pause(False), methods=["POST"]),
    Route("/api/scheduler/pause", _pause(True), methods=["POST"]),
    Route("/api/scheduler/resume", _pause(False), methods=["POST"]),
    Route("/api/runs", api_runs, methods=["GET"]),
    Route("/api/runs/{run_id}", api_run, methods=["GET"]),
    Route("/api/runs/{run_id}/events", api_events, methods=["GET"]),
    Route("/api/runs/{run_id}/stream", api_stream, methods=["GET"]),
    Route("/api/runs/{run_id}/kill", kill_run, methods=["POST"]),
    Route("/api/runs/{run_id}/approve", _suspension_answer(True), methods=["POST"]),
    Route("/api/runs/{run_id}/deny", _suspension_answer(False), methods=["POST"]),
    Route("/api/runs/{run_id}/reply", _talk(True), methods=["POST"]),
    Route("/api/runs/{run_id}/say", _talk(False), methods=["POST"]),
    Route("/api/runs/{run_id}/replay", replay_run, methods=["POST"]),
    Route("/api/runs/{run_id}/record", record_run, methods=["POST"]),
    Route("/api/replays/{token}", api_replay, methods=["GET"]),
    Route("/api/deliveries/{receipt}/replay", replay_delivery, methods=["POST"]),
]


def add_routes(app: Any) -> None:
    """Add the dashboard to the scheduler's Starlette app, unless its password's verifier may
    have been copied (then the server does not start: ``password.start_refusal``)."""
    engine = app.state.engine
    refusal = start_refusal(engine.project.state_dir, getattr(engine, "made_private", ()))
    if refusal is not None:
        app.state.refusals.append(refusal)
        return
    static = StaticFiles(packages=[("llamaherd_dashboard", "static")])
    # The sign-in form is read before anyone is known: it takes what a token or password,
    # the CSRF value and the page to go on to need, and no more.
    app.state.body_limits["/login"] = SIGN_IN_BODY
    app.router.routes.extend(
        [*ROUTES, Mount("/static/dashboard", app=static, name="dashboard-static")]
    )

"""``POST /webhooks/{name}`` on the scheduler's server, for every ``[webhooks.<name>]`` source,
and ``GET /webhooks/{name}`` for the sources that answer a challenge there (X's CRC).

Action Llama receives at ``/webhooks/<type>`` (``/webhooks/github``), and senders are set up
with that URL: when no source is named so, a delivery there goes to the source of that type (of
several, the one whose secret verifies the signature: ``Ingest.pick``).

A delivery is the hot path: ``WebhookEndpoint`` is a plain ASGI handler (``app.state.raw_routes``)
rather than a framework route. The server admits its body within the source's ``maxBodyBytes``
(``WebhookEndpoint.body_limit``, with every body under the server's budget and deadline:
``llamaherd.http_guard``); the endpoint reads it, then verifies, parses and matches it on the
event loop (``Ingest.examine``: no database), and hands the one write (receipt, dedupe, queued
items) to the store's writer, awaiting its commit: one hand-over off the loop. A body above
``LOOP_BODY`` goes whole to the thread pool instead (verifying and parsing it would hold up the
loop).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamaherd.api import require_token
from llamaherd_webhooks.ingest import Ingest, Outcome, Routes
from llamaherd_webhooks.receipts import Receipts
from llamaherd_webhooks.throttle import RejectThrottle
from llamaherd_webhooks.trigger import dedupe_key

log = logging.getLogger("llamaherd.webhooks")


def respond(outcome: Outcome) -> Response:
    """The source's own reply, byte for byte, else the JSON receipt."""
    if outcome.reply is not None:
        reply = outcome.reply
        return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
    return JSONResponse(outcome.body, status_code=outcome.status)


async def challenge(request: Request) -> Response:
    """Answer a GET challenge (X's CRC) with the source's ``answer_get``; nothing is stored."""
    ingest = Ingest(request.app.state.engine)
    candidates = ingest.candidates(request.path_params["name"])
    if isinstance(candidates, Outcome):
        return respond(candidates)
    if len(candidates) > 1:  # the answer depends on the source's secret: it must be named
        names = ", ".join(config.name for config in candidates)
        return respond(Outcome(409, {"error": f"several sources ({names}): use /webhooks/<name>"}))
    config = candidates[0]
    try:
        outcome = await run_in_threadpool(ingest.challenge, config, dict(request.query_params))
    except Exception:
        log.exception("webhook %s: challenge failed", config.name)
        outcome = Outcome(422, {"error": "challenge could not be answered"})
    return respond(outcome)


PREFIX = "/webhooks/"
# Bodies up to this size are verified and parsed on the event loop (microseconds); a larger one
# goes to the thread pool whole.
LOOP_BODY = 64 * 1024
JSON_HEADERS = [(b"content-type", b"application/json")]
# What a POST to a name that is no source may send (it is answered 404 unread).
NO_SOURCE_BODY = 64 * 1024


class WebhookEndpoint:
    """``POST /webhooks/<name>`` as a plain ASGI handler; any other request under the prefix
    (a GET challenge) goes on to the framework's routes (``app``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.engine = app.state.engine
        self._routes: Routes | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name = scope["path"][len(PREFIX) :]
        if scope["method"] != "POST" or not name or "/" in name:
            await self.app(scope, receive, send)
            return
        unread = True
        try:
            outcome, unread = await self._take(scope, receive, name)
        except Exception:  # a client must never see a 500, whatever went wrong
            log.exception("webhook %s: unexpected failure", name)
            outcome = Outcome(422, {"error": "delivery could not be processed"})
        await _answer(send, outcome, close=unread)

    def routes(self, engine: Any) -> Routes:
        """The loaded project's routes, resolved again after a live reload."""
        routes = self._routes
        if routes is None or routes.project is not engine.project:
            routes = self._routes = Routes(engine.project, engine.registry)
        return routes

    def body_limit(self, path: str) -> int:
        """What ``/webhooks/<name>`` takes (``app.state.body_limits``): the largest
        ``maxBodyBytes`` of the sources the name may stand for."""
        candidates = self.routes(self.engine).candidates(path[len(PREFIX) :])
        if isinstance(candidates, Outcome):
            return NO_SOURCE_BODY
        return max(config.max_body for config in candidates)

    async def _take(self, scope: dict[str, Any], receive: Any, name: str) -> tuple[Outcome, bool]:
        """The outcome, and whether part of the body was left unread (then the connection is
        closed after the answer)."""
        engine = self.engine
        client = scope.get("client")
        ingest = Ingest(
            engine, self.app.state.webhook_rejects, client[0] if client else "", self.routes(engine)
        )
        candidates = ingest.candidates(name)
        if isinstance(candidates, Outcome):
            return candidates, True
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:  # lower-cased by the server; the first one wins
            headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
        try:
            body = await read_body(receive)
        except Disconnected:
            gone = "the client disconnected before sending the whole body"
            return Outcome(400, {"error": gone}), True
        if len(body) > LOOP_BODY:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, ingest.take, candidates, headers, body), False
        config = ingest.pick(candidates, headers, body)
        if isinstance(config, Outcome):
            return config, False
        return await ingest.receive_async(config, headers, body), False


class Disconnected(Exception):
    """The client went away before sending the whole body."""


async def read_body(receive: Any) -> bytes:
    """The request body from ASGI ``receive`` (the server bounds it: ``body_limit``);
    ``Disconnected`` when the client went away first."""
    message = await receive()
    body = message.get("body", b"")
    if message["type"] == "http.request" and not message.get("more_body"):
        return body  # the common case: one message
    chunks = [body]
    while message["type"] == "http.request" and message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    if message["type"] != "http.request":
        raise Disconnected
    return b"".join(chunks)


async def _answer(send: Any, outcome: Outcome, close: bool) -> None:
    """The source's own reply byte for byte, else the JSON receipt."""
    if outcome.reply is not None:
        reply = outcome.reply
        body = reply.body if isinstance(reply.body, bytes) else str(reply.body).encode()
        headers = [(b"content-type", reply.content_type.encode("latin-1"))]
    else:
        text = json.dumps(outcome.body, ensure_ascii=False, separators=(",", ":"))  # as before
        body, headers = text.encode(), list(JSON_HEADERS)
    headers.append((b"content-length", str(len(body)).encode()))
    if close:
        headers.append((b"connection", b"close"))
    status = outcome.status if outcome.reply is None else outcome.reply.status
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _count(raw: str | None, default: int, high: int) -> int:
    return min(high, int(raw)) if raw and raw.isdigit() else default


@require_token
async def deliveries(request: Request) -> Response:
    """``GET /control/deliveries?limit=&offset=&dead=1``: receipts, newest first, each with
    its body's size (never the body: it may be large, and the dashboard lists many) and the
    runs it started, by matched agent (``runs``: agent -> run ids; none while queued)."""
    query = request.query_params
    limit = max(1, _count(query.get("limit"), 50, 500))
    offset = _count(query.get("offset"), 0, 10**9)
    dead = query.get("dead") in ("1", "true")
    store = request.app.state.engine.store
    rows = await run_in_threadpool(Receipts(store).recent, limit, dead, offset)
    keys = {
        (row["id"], agent): dedupe_key(row["source"], row["delivery_id"], agent)
        for row in rows
        for agent in row["matched"] or []
    }
    runs = await run_in_threadpool(store.runs_of_keys, sorted(set(keys.values())))
    listed = [
        {
            **{k: v for k, v in row.items() if k != "body"},
            "body_size": len(row["body"]),
            "runs": {a: runs.get(keys[row["id"], a], []) for a in row["matched"] or []},
        }
        for row in rows
    ]
    return JSONResponse({"deliveries": listed})


@require_token
async def replay(request: Request) -> Response:
    """``POST /control/deliveries/{id}/replay``: route a recorded delivery again."""
    raw = request.path_params["receipt"]
    if not raw.isdigit():
        return JSONResponse({"error": f"no delivery {raw!r}"}, status_code=404)
    outcome = await run_in_threadpool(Ingest(request.app.state.engine).replay, int(raw))
    return JSONResponse(outcome.body, status_code=outcome.status)


def add_routes(app: Any) -> None:
    """Mount the webhook routes on the scheduler's Starlette app. Their bodies are bounded
    by each source's ``maxBodyBytes`` (``WebhookEndpoint.body_limit``)."""
    endpoint = WebhookEndpoint(app)
    app.state.body_limits[PREFIX] = endpoint.body_limit
    app.state.webhook_rejects = RejectThrottle()
    engine = app.state.engine
    if not engine.loading.ready:  # a scheduler taking deliveries before its agents are read
        engine.loading.on_ready(lambda: Ingest(engine).route_pending())
    app.state.raw_routes[PREFIX] = endpoint
    app.router.routes.append(Route("/webhooks/{name}", challenge, methods=["GET"]))
    app.router.routes.append(Route("/control/deliveries", deliveries, methods=["GET"]))
    app.router.routes.append(
        Route("/control/deliveries/{receipt}/replay", replay, methods=["POST"])
    )

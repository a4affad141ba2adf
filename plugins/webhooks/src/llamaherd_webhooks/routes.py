"""``POST /webhooks/{name}`` on the scheduler's server, for every ``[webhooks.<name>]`` source,
and ``GET /webhooks/{name}`` for the sources that answer a challenge there (X's CRC).

Action Llama receives at ``/webhooks/<type>`` (``/webhooks/github``), and senders are set up
with that URL: when no source is named so, a delivery there goes to the source of that type (of
several, the one whose secret verifies the signature: ``Ingest.pick``).

The body is read with the source's size limit before anything else; the rest of the work
(blocking store calls) runs in Starlette's thread pool through ``Ingest.receive``.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamaherd.api import require_token
from llamaherd_webhooks.ingest import Ingest, Outcome
from llamaherd_webhooks.receipts import Receipts
from llamaherd_webhooks.throttle import RejectThrottle
from llamaherd_webhooks.trigger import dedupe_key

log = logging.getLogger("llamaherd.webhooks")


async def read_limited(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def respond(outcome: Outcome) -> Response:
    """The source's own reply, byte for byte, else the JSON receipt."""
    if outcome.reply is not None:
        reply = outcome.reply
        return Response(reply.body, status_code=reply.status, media_type=reply.content_type)
    return JSONResponse(outcome.body, status_code=outcome.status)


async def receive(request: Request) -> Response:
    """Take one delivery: 202 once it is durably routed (or the source's own reply), 4xx when
    refused, never a 500."""
    try:
        outcome = await _receive(request)
    except Exception:  # a client must never see a 500, whatever went wrong
        log.exception("webhook %s: unexpected failure", request.path_params.get("name"))
        outcome = Outcome(422, {"error": "delivery could not be processed"})
    return respond(outcome)


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


async def _receive(request: Request) -> Outcome:
    client = request.client.host if request.client else ""
    ingest = Ingest(request.app.state.engine, request.app.state.webhook_rejects, client)
    candidates = ingest.candidates(request.path_params["name"])
    if isinstance(candidates, Outcome):
        return candidates
    try:
        body = await read_limited(request, max(config.max_body for config in candidates))
    except ClientDisconnect:
        return Outcome(400, {"error": "the client disconnected before sending the whole body"})
    # One hand-over to the thread pool per delivery: picking the source reads credentials.
    return await run_in_threadpool(ingest.take, candidates, dict(request.headers), body)


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
    by each source's ``maxBodyBytes`` (``read_limited``), not the server's default limit."""
    app.state.body_limits["/webhooks/"] = None
    app.state.webhook_rejects = RejectThrottle()
    app.router.routes.append(Route("/webhooks/{name}", receive, methods=["POST"]))
    app.router.routes.append(Route("/webhooks/{name}", challenge, methods=["GET"]))
    app.router.routes.append(Route("/control/deliveries", deliveries, methods=["GET"]))
    app.router.routes.append(
        Route("/control/deliveries/{receipt}/replay", replay, methods=["POST"])
    )

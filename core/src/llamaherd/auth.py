"""Who may use the scheduler's HTTP server: the control token and the checks built on it.

The control API, the dashboard and any plugin's routes share these, so there is one place that
decides what a request proves. The token lives in ``.al/control-token`` (0600); the CLI reads it
from there, a browser gets it once through the dashboard's login.

``/control/*`` (``require_token``) takes only ``Authorization: Bearer``: a browser never adds
that header on its own, so no other origin can forge a control request (the dashboard's cookie
is for the dashboard's own routes, which check Origin and CSRF). Being on 127.0.0.1 proves
nothing (agents and other local users are there too), so reads need the token as writes do, and
a ``Host`` that names neither this machine's loopback nor the server's configured name (DNS
rebinding) is refused before anything else.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from llamaherd.errors import LlamaherdError
from llamaherd.statedir import private_dir

if TYPE_CHECKING:  # the CLI reads the token without loading the HTTP stack
    from starlette.requests import Request
    from starlette.responses import Response

Handler = Callable[["Request"], Awaitable["Response"]]
# Action Llama's credential for its gateway and dashboard: a bearer here as the control token.
PEER_KEY_TYPE = "gateway_api_key"
# Host names that always mean this machine; ``app.state.host_names`` adds the configured ones.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def control_token(state_dir: Path) -> str:
    """The control API token in ``.al/control-token`` (0600), created on first use."""
    path = state_dir / "control-token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    private_dir(state_dir)
    token = secrets.token_urlsafe(32)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".control-token.")
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    os.chmod(tmp, 0o600)
    try:
        os.link(tmp, path)  # first writer wins, so concurrent starts agree on one token
    except FileExistsError:
        token = path.read_text().strip()
    finally:
        os.unlink(tmp)
    return token


def is_local(request: Request) -> bool:
    client = request.client
    return client is None or client.host in ("127.0.0.1", "::1", "localhost")


def token_matches(request: Request, given: str) -> bool:
    """Whether ``given`` is this server's control token, or Action Llama's gateway API key
    (the ``gateway_api_key`` credential, read on each request so a rotated key applies at
    once), both compared in constant time."""
    keys = [request.app.state.control_token, peer_api_key(request)]
    matched = [bool(key) and hmac.compare_digest(given.encode(), key.encode()) for key in keys]
    return bool(given) and any(matched)


def peer_api_key(request: Request) -> str:
    """The ``key`` of the ``gateway_api_key`` credential ("" when there is none)."""
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        return ""
    try:
        stored = engine.credentials.read(PEER_KEY_TYPE) or {}
    except (OSError, LlamaherdError):
        return ""
    return stored.get("key", "")


def bearer_token(request: Request) -> str:
    """The token of an ``Authorization: Bearer`` header ("" when there is none)."""
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else ""


def authorized(request: Request) -> bool:
    """True when the request carries the control token as ``Authorization: Bearer`` (never a
    cookie: a browser sends those cross-site)."""
    return token_matches(request, bearer_token(request))


def host_name(request: Request) -> str:
    """The name the client asked for in ``Host`` (no port, no brackets; "" when absent)."""
    return urlsplit(f"//{request.headers.get('host', '')}").hostname or ""


def known_host(request: Request, extra: Collection[str] = ()) -> bool:
    """Whether ``Host`` names this server: a loopback name, or one the configuration gives it
    (``[gateway] url``, a specific ``bind`` address: ``app.state.host_names``). Anything else is
    a DNS-rebinding page or a misdirected request."""
    configured = getattr(request.app.state, "host_names", ())
    return host_name(request) in (*LOCAL_NAMES, *configured, *extra)


def require_token(handler: Handler) -> Handler:
    """Control endpoints, reads and writes alike: a known ``Host`` (else 421) and the control
    token as ``Authorization: Bearer`` (else 401), checked before the body is read."""

    async def wrapper(request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not known_host(request):
            return JSONResponse(
                {"error": f"Host {host_name(request)!r} is not this server's name"},
                status_code=421,
            )
        if not token_matches(request, bearer_token(request)):
            return JSONResponse(
                {"error": "control token required (Authorization: Bearer, .al/control-token)"},
                status_code=401,
            )
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, made valid and within the shape limits (lone surrogates,
    NaN: stored, they break listings; ``llamaherd.inbound``)."""
    from llamaherd.inbound import OverLimit, parse

    try:
        data = parse(await request.body())
    except OverLimit as exc:
        raise LlamaherdError(f"request body {exc}") from None
    except ValueError:
        raise LlamaherdError("request body must be JSON") from None
    if not isinstance(data, dict):
        raise LlamaherdError("request body must be a JSON object")
    return data

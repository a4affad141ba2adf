"""Who may use the scheduler's HTTP server: the control token and the checks built on it.

The control API, the dashboard and any plugin's routes share these, so there is one place that
decides what a request proves. The token lives in ``.al/control-token`` (0600); the CLI reads it
from there, a browser gets it once through the dashboard's login.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamaherd.statedir import private_dir
from llamaherd.types import LlamaherdError

if TYPE_CHECKING:  # the CLI reads the token without loading the HTTP stack
    from starlette.requests import Request
    from starlette.responses import Response

Handler = Callable[["Request"], Awaitable["Response"]]


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
    """Whether ``given`` is this server's control token (compared in constant time)."""
    expected = request.app.state.control_token
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def authorized(request: Request) -> bool:
    """True when the request carries the control token (Bearer header or ``al_token`` cookie)."""
    header = request.headers.get("authorization", "")
    given = (
        header[7:] if header.lower().startswith("bearer ") else request.cookies.get("al_token", "")
    )
    return token_matches(request, given)


def require_token(handler: Handler) -> Handler:
    """Mutating control endpoints: the control token is required, from anywhere."""

    async def wrapper(request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not authorized(request):
            return JSONResponse({"error": "control token required"}, status_code=401)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


def require_read(handler: Handler) -> Handler:
    """Read endpoints: open on the loopback interface, token required from elsewhere."""

    async def wrapper(request: Request) -> Response:
        from starlette.responses import JSONResponse

        if not is_local(request) and not authorized(request):
            return JSONResponse({"error": "control token required"}, status_code=401)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


async def json_body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise LlamaherdError("request body must be JSON") from None
    if not isinstance(data, dict):
        raise LlamaherdError("request body must be a JSON object")
    return data

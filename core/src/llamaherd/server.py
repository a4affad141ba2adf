"""The one HTTP server: control API for the CLI, plus every plugin's routes (gateway, webhooks,
dashboard). Served by uvicorn in background threads, on TCP and on a unix socket.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamaherd.types import LlamaherdError

log = logging.getLogger("llamaherd.server")

Handler = Callable[[Request], Awaitable[Response]]


def control_token(state_dir: Path) -> str:
    """The control API token in ``.al/control-token`` (0600), created on first use."""
    path = state_dir / "control-token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
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


def authorized(request: Request) -> bool:
    """True when the request carries the control token (Bearer header or ``al_token`` cookie)."""
    expected = request.app.state.control_token
    header = request.headers.get("authorization", "")
    given = header[7:] if header.lower().startswith("bearer ") else request.cookies.get("al_token", "")
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def require_token(handler: Handler) -> Handler:
    """Mutating control endpoints: the control token is required, from anywhere."""

    async def wrapper(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "control token required"}, status_code=401)
        return await handler(request)

    wrapper.__name__ = handler.__name__
    return wrapper


def require_read(handler: Handler) -> Handler:
    """Read endpoints: open on the loopback interface, token required from elsewhere."""

    async def wrapper(request: Request) -> Response:
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


async def on_user_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)


def build_app(engine: Any) -> Starlette:
    """The Starlette app with the control API and every plugin's ``register_routes``."""
    from llamaherd import control
    from llamaherd.plugins import get_manager

    app = Starlette(
        routes=[Route(path, endpoint, methods=methods) for path, endpoint, methods in control.ROUTES],
        exception_handlers={LlamaherdError: on_user_error},
    )
    app.state.engine = engine
    app.state.control_token = control_token(engine.project.state_dir)
    get_manager().call_each("register_routes", app=app)
    return app


class ServerThread:
    """uvicorn serving ``app`` in a daemon thread, on a TCP socket or a unix socket."""

    def __init__(self, app: Starlette, *, host: str = "127.0.0.1", port: int = 0, uds: str | None = None):
        import uvicorn

        self.sock = _bind(host, port, uds)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
            backlog=2048,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="http", daemon=True
        )

    @property
    def port(self) -> int | None:
        name = self.sock.getsockname()
        return name[1] if isinstance(name, tuple) else None

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and self.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        if not self.server.started:
            raise LlamaherdError("HTTP server failed to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def _bind(host: str, port: int, uds: str | None) -> socket.socket:
    if uds:
        try:
            os.unlink(uds)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(uds)
        os.chmod(uds, 0o666)  # sandboxes run as other users; the run token is the guard
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto must be explicit: asyncio sets TCP_NODELAY on accepted sockets only when it is
        # IPPROTO_TCP, and without it keep-alive replies wait ~40 ms on delayed ACKs.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LlamaherdError(
                f"cannot listen on {host}:{port}: {exc.strerror} "
                "(set [gateway] port in config.toml, or stop what uses it)"
            ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock

"""The one HTTP server: every plugin's routes (core's control API and gateway, webhooks,
dashboard). Served by uvicorn in background threads, on TCP and on a unix socket.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from llamaherd.auth import control_token
from llamaherd.errors import CommandFailed, Conflict, LlamaherdError
from llamaherd.http_guard import BODY_LIMITS, GuardedProtocol, Limits

log = logging.getLogger("llamaherd.server")


async def on_user_error(request: Request, exc: Exception) -> Response:
    """A bad request is 400; one the current state refuses (``Conflict``) is 409."""
    return JSONResponse({"error": str(exc)}, status_code=409 if isinstance(exc, Conflict) else 400)


def build_app(engine: Any) -> Starlette:
    """The Starlette app with every plugin's ``register_routes`` (core's control API and gateway
    are built-in plugins)."""
    from llamaherd.plugins import get_manager

    app = Starlette(exception_handlers={LlamaherdError: on_user_error})
    app.state.engine = engine
    app.state.control_token = control_token(engine.project.state_dir)
    app.state.host_names = configured_host_names(engine.project.config.get("gateway") or {})
    app.state.body_limits = dict(BODY_LIMITS)  # plugins add their prefixes in register_routes
    app.state.raw_routes = {}  # prefix -> plain ASGI handler (``RawRoutes``)
    # Why a plugin cannot serve safely (register_routes appends one line each): no start then.
    app.state.refusals = []
    if engine.route_plugins is None:
        get_manager().call_each("register_routes", app=app)
    else:  # a fenced engine serves only what its runs need (the gateway)
        import importlib

        for module in engine.route_plugins:
            importlib.import_module(module).register_routes(app=app)
    if app.state.refusals:
        raise LlamaherdError("; ".join(app.state.refusals))
    return app


def configured_host_names(gateway: dict[str, Any]) -> tuple[str, ...]:
    """Names besides loopback that ``Host`` may carry (``auth.known_host``): the host of
    ``[gateway] url`` and a specific ``bind`` address."""
    from urllib.parse import urlsplit

    names = [urlsplit(str(gateway.get("url", ""))).hostname or ""]
    bind = str(gateway.get("bind", ""))
    if bind not in ("", "0.0.0.0", "::"):
        names.append(bind)
    return tuple(name for name in names if name)


class RawRoutes:
    """ASGI: a request under a prefix of ``routes`` goes to that plain handler, ahead of the
    framework's routing and middleware (a hot path such as webhook deliveries: per-request
    framework overhead would be most of its cost); any other to ``app``, where a request whose
    client left before its body ended (or that ``http_guard`` answered itself: a body over its
    limit, its budget or its time) ends quietly: there is no one to answer."""

    def __init__(self, app: Any, routes: dict[str, Any]):
        self.app = app
        self.routes = routes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            for prefix, handler in self.routes.items():
                if path.startswith(prefix):
                    await handler(scope, receive, send)
                    return
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            pass


class ServerThread:
    """uvicorn serving ``app`` in a daemon thread, on a TCP socket or a unix socket, within
    ``limits`` (``llamaherd.http_guard``; the bodies of ``app.state.body_limits``)."""

    def __init__(
        self,
        app: Starlette,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        uds: str | None = None,
        limits: Limits | None = None,
    ):
        import uvicorn

        self.sock = _bind(host, port, uds)
        limits = limits or Limits()
        limits.routes = app.state.body_limits
        config = uvicorn.Config(
            RawRoutes(app, app.state.raw_routes),
            http=partial(GuardedProtocol, limits=limits),  # type: ignore[arg-type]
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
            backlog=2048,
        )
        self.server = _quiet_server_class()(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="http", daemon=True
        )

    @property
    def port(self) -> int | None:
        name = self.sock.getsockname()
        return name[1] if isinstance(name, tuple) else None

    def start(self) -> ServerThread:
        self.thread.start()
        self.server.ready.wait(10)
        if not self.server.started:
            raise CommandFailed("HTTP server failed to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.server.wake()
        self.thread.join(timeout=5)


@functools.cache
def _quiet_server_class() -> type:
    """uvicorn's Server, woken by ``stop`` instead of polling ``should_exit`` ten times a second
    and ticking each second for the ``Date`` header (``GuardedProtocol`` dates each answer): an
    idle scheduler stays idle, and stops at once. ``ready`` tells ``start`` it serves (no
    polling for ``started`` either)."""
    import asyncio

    import uvicorn

    class QuietServer(uvicorn.Server):
        _loop: asyncio.AbstractEventLoop | None = None
        _exit: asyncio.Event | None = None

        def __init__(self, config: uvicorn.Config):
            super().__init__(config)
            self.ready = threading.Event()  # set once it serves, or once it gave up

        def run(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                super().run(sockets)
            finally:
                self.ready.set()

        async def main_loop(self) -> None:
            self._loop, self._exit = asyncio.get_running_loop(), asyncio.Event()
            self.ready.set()
            await self._exit.wait()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """uvicorn's, without its fixed 0.1 s pause when no connection is open."""
            if self.server_state.connections or self.server_state.tasks:
                await super().shutdown(sockets)
                return
            for server in self.servers:
                server.close()
            for sock in sockets or []:
                sock.close()
            for server in self.servers:
                await server.wait_closed()

        def wake(self) -> None:
            loop, event = self._loop, self._exit
            if loop is not None and event is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(event.set)

    return QuietServer


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
            raise CommandFailed(
                f"cannot listen on {host}:{port}: {exc.strerror} "
                "(set [gateway] port in config.toml, or stop what uses it)"
            ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock

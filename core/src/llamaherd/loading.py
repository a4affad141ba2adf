"""A scheduler listens before it loads its agents: how far the loading got, and the requests
that wait for it.

``al start`` opens its store and its HTTP server first, so ``/health`` answers and webhook
deliveries are taken into the durable store whatever the number of agents; then it reads,
validates and registers the agents (``Scheduler.load``), its progress here for ``/health``,
``al stat`` and the terminal view ("loading 3,200 of 5,000 agents"). Requests that need the
agents wait for them (``LoadingGate``); a route that does not (``/health``, the webhook
deliveries, ``al stat``) reads ``Loading`` itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("llamaherd.loading")

# Seconds a request that needs the agents waits for them before it is answered 503.
GATE_WAIT = 120.0
# Paths answered while the agents load: they read ``Loading`` themselves.
OPEN_PATHS = ("/health", "/control/health", "/control/stat")


class Loading:
    """How far a scheduler's start got: ``phase`` ("starting", "loading", "validating",
    "starting triggers", "ready"), ``done`` of ``total`` agents. ``finish`` marks it ready:
    the callbacks given to ``on_ready`` run (in that thread), then waiting requests go on.
    An engine that loads its project up front (``al run``, tests) is ready from the start."""

    def __init__(self, ready: bool = False) -> None:
        self.phase = "ready" if ready else "starting"
        self.done = 0
        self.total = 0
        self._ready = threading.Event()
        self._ended = threading.Event()  # ready, or the start failed or was stopped
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        if ready:
            self._ready.set()
            self._ended.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def progress(self, phase: str, done: int, total: int) -> None:
        self.phase, self.done, self.total = phase, done, total

    def describe(self) -> str:
        """ "loading 3,200 of 5,000 agents"; "ready" once done."""
        if self.ready:
            return "ready"
        if self.phase in ("loading", "validating"):
            return f"{self.phase} {self.done:,} of {self.total:,} agents"
        return self.phase

    def as_dict(self) -> dict[str, Any] | None:
        """``{"phase", "done", "total", "text"}`` while loading; None once ready."""
        if self.ready:
            return None
        return {"phase": self.phase, "done": self.done, "total": self.total,
                "text": self.describe()}  # fmt: skip

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the agents are ready (at once when they are): a route that
        took work while they loaded (a webhook delivery) hands it on then."""
        with self._lock:
            if not self.ready:
                self._callbacks.append(callback)
                return
        callback()

    def finish(self) -> None:
        """The agents are loaded and registered: ready. Then each ``on_ready`` callback runs,
        then the requests waiting in ``LoadingGate`` go on."""
        with self._lock:
            self.phase = "ready"
            self._ready.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a plugin's failure must not stop the scheduler
                log.exception("after loading the agents: %r failed", callback)
        self.end()

    def end(self) -> None:
        """No more loading (ready, or the start failed or is stopping): wake every waiter."""
        with self._lock:
            self._ended.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    async def wait(self, timeout: float) -> bool:
        """Wait on the event loop until loading ended, ``timeout`` seconds at most; whether
        the agents are ready."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._ended.is_set():
                return self.ready
            self._waiters.append((loop, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            with self._lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))
        return self.ready


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LoadingGate:
    """ASGI middleware: while the agents load, an HTTP request that needs them (any but
    ``OPEN_PATHS``) waits until they are ready, ``GATE_WAIT`` seconds at most, then is
    answered 503 with the progress. No body is read here: the request goes on untouched."""

    def __init__(self, app: Any, loading: Loading) -> None:
        self.app = app
        self.loading = loading

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        loading = self.loading
        if (
            scope["type"] == "http"
            and not loading.ready
            and scope["path"] not in OPEN_PATHS
            and not await loading.wait(GATE_WAIT)
        ):
            body = json.dumps({"error": f"the scheduler is starting: {loading.describe()}"})
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                       (b"content-length", str(len(body)).encode())]  # fmt: skip
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await self.app(scope, receive, send)

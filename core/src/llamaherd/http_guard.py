"""Bounds on what a client can make the HTTP server hold: connections, header bytes, the time
to send headers, and body bytes per route.

uvicorn has no header-read timeout, no header size limit under httptools and no connection cap
that closes idle sockets, so 20,000 idle half-open connections exhausted the scheduler's file
descriptors and an 8 MB header was read whole. ``GuardedProtocol`` adds them to uvicorn's
httptools protocol; ``BodyLimit`` (ASGI) refuses bodies larger than their route allows.

- A connection must finish its request headers within ``headerTimeout`` seconds of opening (or
  of the request's first byte on a kept-alive one), else it is answered 408 and closed.
- Header bytes beyond ``MAX_HEADER_BYTES`` are answered 431 and the connection closed.
- Beyond ``maxConnections`` open connections, the one idle longest (no request in progress:
  still sending headers, or kept alive between requests) is closed to make room, so idle
  sockets can never lock out a webhook or the CLI. When every connection is busy, the new one
  is closed instead.
- A body over its route's limit is answered 413 (by ``Content-Length`` before a byte is read,
  else as soon as the limit is passed), and the connection closed.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("llamaherd.server")

MAX_HEADER_BYTES = 64 * 1024  # request line and headers together
MIB = 1024 * 1024
# Body limits by path prefix (``app.state.body_limits``; plugins add theirs, None: the route
# bounds its body itself, as ``/webhooks/`` does with each source's ``maxBodyBytes``).
BODY_LIMITS: dict[str, int | None] = {"/control/": MIB, "/gateway/": 4 * MIB}
DEFAULT_BODY_LIMIT = MIB


@dataclass
class Limits:
    """One server's bounds, shared by its connections (``idle``: oldest first; ``closing``:
    closed by us, ``connection_lost`` still to come)."""

    max_connections: int = 1000
    header_timeout: float = 10.0
    max_header_bytes: int = MAX_HEADER_BYTES
    idle: dict[GuardedProtocol, None] = field(default_factory=dict)
    closing: set[GuardedProtocol] = field(default_factory=set)  # closed, not yet lost

    @classmethod
    def of(cls, gateway: Mapping[str, Any]) -> Limits:
        """From ``[gateway]``: ``maxConnections`` (held under half the process's file
        descriptor limit, which the store, sandboxes and logs share) and ``headerTimeout``."""
        wanted = int(gateway.get("maxConnections", cls.max_connections))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        room = wanted if soft == resource.RLIM_INFINITY else min(wanted, max(16, soft // 2))
        if room < wanted:
            log.warning(
                "[gateway] maxConnections %d lowered to %d: the open-file limit is %d "
                "(raise it with ulimit -n)",
                wanted,
                room,
                soft,
            )
        timeout = float(gateway.get("headerTimeout", cls.header_timeout))
        return cls(max_connections=room, header_timeout=timeout)


def raw_response(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.1 JSON answer that closes the connection, for the protocol layer
    (before any request reached the app)."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class HeadersTooLarge(Exception):
    """Raised in a parser callback to stop parsing a request whose headers are too large."""


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a header size limit and a place
    in its server's connection cap (``Limits``)."""

    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.header_bytes = self.raw_bytes = 0
        self.reading_headers = True
        self.refusal: tuple[int, str, str] | None = None
        self.deadline: Any = None  # the header timer (asyncio.TimerHandle)

    # --------------------------------------------------------------- connection cap
    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._become_idle()
        self._arm_deadline()
        # Connections being closed still count until their ``connection_lost``: not again.
        if len(self.connections) - len(self.limits.closing) > self.limits.max_connections:
            oldest = next(iter(self.limits.idle))
            if oldest is self:
                log.warning("connection cap reached with every connection busy: refusing one")
            oldest._drop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._become_busy()
        self.limits.closing.discard(self)
        super().connection_lost(exc)

    def _become_idle(self) -> None:
        self.limits.idle.pop(self, None)
        self.limits.idle[self] = None  # to the end: the newest idle connection

    def _become_busy(self) -> None:
        self.limits.idle.pop(self, None)
        self._disarm_deadline()

    def _drop(self) -> None:
        self._become_busy()
        if not self.transport.is_closing():
            self.limits.closing.add(self)
            self.transport.close()

    # --------------------------------------------------------------- header deadline
    def _arm_deadline(self) -> None:
        if self.deadline is None:
            self.deadline = self.loop.call_later(self.limits.header_timeout, self._too_slow)

    def _disarm_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _too_slow(self) -> None:
        self.deadline = None
        if self.reading_headers and not self.transport.is_closing():
            self._refuse(408, "Request Timeout", "request headers not received in time")

    def _refuse(self, status: int, reason: str, message: str) -> None:
        self.transport.write(raw_response(status, reason, message))
        self._drop()

    # --------------------------------------------------------------- header size
    # Two counts: the parsed request line and headers (exact, known once they are complete),
    # and the raw bytes received while they are incomplete (one huge header is buffered by the
    # parser until it ends, so the exact count would come too late).
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.reading_headers and not self.transport.is_closing():
            self.raw_bytes += len(data)
            if self.raw_bytes > self.limits.max_header_bytes:
                self._refuse(*self._too_large())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._date_header()
        self.reading_headers = True
        self.header_bytes = self.raw_bytes = 0
        self._arm_deadline()

    def on_url(self, url: bytes) -> None:
        self.header_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.reading_headers = False
        self._become_busy()
        if self.header_bytes > self.limits.max_header_bytes:
            self.refusal = self._too_large()
            raise HeadersTooLarge  # stops the parser: uvicorn answers with send_400_response
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if self.refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(*self.refusal)

    def _date_header(self) -> None:
        """The ``Date`` header of this second in the server's default headers (uvicorn's
        server wakes each second to renew it; ours sleeps until it is stopped)."""
        now = int(time.time())
        state = self.server_state
        if getattr(state, "date_second", None) != now:
            state.date_second = now
            date = (b"date", formatdate(now, usegmt=True).encode())
            state.default_headers = [date, *self.config.encoded_headers]

    def _too_large(self) -> tuple[int, str, str]:
        limit = self.limits.max_header_bytes
        return 431, "Request Header Fields Too Large", f"request headers larger than {limit} bytes"

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # kept alive, no pipelined request next
            self._become_idle()  # uvicorn's keep-alive timeout closes it later


Send = Callable[[dict[str, Any]], Any]


class BodyLimit:
    """ASGI middleware: a request body larger than its route's limit is answered 413."""

    def __init__(self, app: Any, limits: Mapping[str, int | None]):
        self.app = app
        self.limits = limits  # the app's ``state.body_limits``, read per request

    def limit_for(self, path: str) -> int | None:
        matches = [prefix for prefix in self.limits if path.startswith(prefix)]
        return self.limits[max(matches, key=len)] if matches else DEFAULT_BODY_LIMIT

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        limit = self.limit_for(scope["path"]) if scope["type"] == "http" else None
        if limit is None:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        has_body = declared not in (b"", b"0") or b"transfer-encoding" in headers
        await _LimitedRequest(self.app, limit, has_body).serve(scope, receive, send)


class _LimitedRequest:
    """One request under ``BodyLimit``: counts body bytes as the app reads them."""

    def __init__(self, app: Any, limit: int, has_body: bool):
        self.app = app
        self.limit = limit
        self.received = 0
        self.body_done = not has_body
        self.started = False
        self.answered = False  # 413 sent: whatever the app sends afterwards is dropped

    async def serve(self, scope: dict[str, Any], receive: Any, send: Send) -> None:
        async def limited_receive() -> dict[str, Any]:
            message = await receive()
            if message["type"] != "http.request":
                return message
            self.received += len(message.get("body", b""))
            self.body_done = not message.get("more_body", False)
            if self.received <= self.limit:
                return message
            if not self.started:
                self.answered = True
                await _too_large(send, self.limit)
            return {"type": "http.disconnect"}  # the app stops reading (ClientDisconnect)

        async def guarded_send(message: dict[str, Any]) -> None:
            if self.answered:
                return
            if message["type"] == "http.response.start":
                self.started = True
                if not self.body_done:  # answered before the body was read: do not read it
                    message = {**message, "headers": [*message["headers"], CLOSE]}
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not self.answered:
                raise


CLOSE = (b"connection", b"close")


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"request body larger than {limit} bytes"}).encode()
    length = str(len(body)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", length), CLOSE]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""Bounds on what a client can make the HTTP server hold: connections, header bytes, request
bodies, and the time to send each.

uvicorn has no header-read timeout, no header size limit under httptools, no connection cap
that closes idle sockets and no bound on request bodies: 20,000 idle half-open connections
exhausted the scheduler's file descriptors, an 8 MB header was read whole, and 600 bodies of
4 MiB held open took 2.45 GB, kept after they went. ``GuardedProtocol`` adds the bounds to
uvicorn's httptools protocol, so every route (every plugin's too) is under them, in one place.

- A connection must finish its request headers within ``headerTimeout`` seconds of opening (or
  of the request's first byte on a kept-alive one), else it is answered 408 and closed.
- Header bytes beyond ``MAX_HEADER_BYTES`` are answered 431.
- Beyond ``maxConnections`` open connections, the one idle longest (no request in progress:
  still sending headers, kept alive between requests, or being closed) is closed to make room,
  so idle sockets can never lock out a webhook or the CLI. When every connection is busy, the
  new one is closed instead.
- A body larger than its route takes (``Limits.routes``: ``app.state.body_limits``) is answered
  413: by ``Content-Length`` before a byte of it is read, a chunked one as soon as it passes.
- Body bytes in flight (admitted, not yet answered) are bounded for the whole process
  (``BodyBudget``) and for each credential (the requests carrying one ``Authorization``: a run's
  token on the gateway) to ``1/CREDENTIAL_SHARE`` of it. A body that does not fit is answered
  503 (the process's budget) or 429 (its credential's share) with ``Retry-After``, before it is
  read; a body declaring its length reserves it whole when admitted, a chunked one as it
  arrives. With the process's budget full, bodies that received nothing for ``STALLED``
  seconds are cut first (408), stalest first: held-open bodies cannot lock out a webhook.
- A body must arrive whole within ``bodyTimeout`` seconds of its headers, else 408.
- An answer sent before its request's body was received whole closes the connection: the rest
  is never read. Refusals (413, 429, 503, 431) stop reading the request, answer, then discard
  what the client still sends for up to ``LINGER_SECONDS`` (``LINGER_BYTES``) before closing,
  so a client still sending reads the answer rather than a reset; a client too slow (408) is
  closed at once.
- Once the bodies in flight reached ``TRIM_AFTER`` bytes and all ended, the allocator is asked
  to return its free memory to the system (``BodyBudget.trim``), so a burst is not kept.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import json
import logging
import resource
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, NamedTuple
from urllib.parse import unquote

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llamaherd.project import GATEWAY_DEFAULTS

log = logging.getLogger("llamaherd.server")

KIB, MIB = 1024, 1024 * 1024
MAX_HEADER_BYTES = 64 * KIB  # request line and headers together
# What a route's body may hold (``app.state.body_limits``): a path, or a prefix ending in "/",
# to bytes or to a function of the path giving them (``/webhooks/<name>``: its source's
# ``maxBodyBytes``); the longest key that matches wins. Plugins add their routes' limits in
# ``register_routes``; a route none names takes ``DEFAULT_BODY_LIMIT``.
BodyLimit = int | Callable[[str], int]
BODY_LIMITS: dict[str, BodyLimit] = {"/control/": MIB, "/gateway/": 16 * KIB}
DEFAULT_BODY_LIMIT = MIB
BODY_BUDGET: int = GATEWAY_DEFAULTS["bodyBudget"]  # body bytes in flight in the whole process
CREDENTIAL_SHARE = 8  # one credential holds at most this fraction of the budget
BODY_TIMEOUT: float = GATEWAY_DEFAULTS["bodyTimeout"]  # seconds from the headers to the body's end
STALLED = 1.0  # seconds without a byte after which a body may be cut to make room
SWEEP = 0.5  # seconds between looks for bodies past their deadline, while there are any
RETRY_AFTER = 1  # seconds, in the 429 and 503 answers: by then a held body may be cut (STALLED)
GRANULE = 64 * KIB  # a chunked body reserves its budget in steps of this many bytes
LINGER_SECONDS = 2.0
LINGER_BYTES = 8 * MIB
REFUSALS_LOGGED_EVERY = 10.0  # seconds: one log line per kind of refusal at most, with a count
# Once the bodies in flight have reached this many bytes and all ended, the allocator is asked
# to return its free memory to the system (``BodyBudget.trim``): it keeps a burst's worth
# otherwise (600 bodies of 1 MB held open left 471 MB after they went).
TRIM_AFTER = MIB
TRIM_DELAY = 0.5  # seconds after the last body ended (a burst often comes in waves)


class Refusal(NamedTuple):
    """An answer the protocol layer gives itself (no route saw the request)."""

    status: int
    reason: str
    message: str
    retry_after: int | None = None

    def raw(self) -> bytes:
        """The complete HTTP/1.1 JSON answer, closing the connection."""
        body = json.dumps({"error": self.message}).encode()
        wait = f"retry-after: {self.retry_after}\r\n" if self.retry_after is not None else ""
        head = (
            f"HTTP/1.1 {self.status} {self.reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{wait}connection: close\r\n\r\n"
        )
        return head.encode("latin-1") + body


def too_large(limit: int, path: str) -> Refusal:
    message = f"request body larger than {limit} bytes (the most {path} takes)"
    return Refusal(413, "Content Too Large", message)


@dataclass(eq=False, slots=True)
class Hold:
    """One request body's place in a ``BodyBudget``: what it reserved and received, when its
    last byte came and when it must have come whole, and the protocol (connection) to cut
    when it must make room."""

    protocol: GuardedProtocol
    cycle: Any  # uvicorn's RequestResponseCycle of the request
    key: bytes | None  # its credential (``Authorization``), None without one
    limit: int  # what its route takes
    path: str
    last_byte: float  # time.monotonic()
    deadline: float
    reserved: int = 0
    received: int = 0
    complete: bool = False  # received whole
    released: bool = False
    keep_alive: bool = True  # the connection's, once the body is received whole


class BodyBudget:
    """What request bodies may cost the process: the bytes it holds at once (``limit``) and
    each credential's share, and the time each may take to arrive (``timeout``). One budget
    is shared by every server (the TCP port and the unix socket) of a process."""

    def __init__(self, limit: int = BODY_BUDGET, timeout: float = BODY_TIMEOUT):
        self.limit = limit
        self.share = max(1, limit // CREDENTIAL_SHARE)
        self.timeout = timeout
        self.used = 0
        self.by_key: dict[bytes, int] = {}
        self.holds: set[Hold] = set()
        self.lock = threading.Lock()
        self.refusals = RefusalLog()
        self.peak = 0  # the most bytes in flight since the allocator last returned memory
        self.trimming: threading.Timer | None = None

    @classmethod
    def of(cls, gateway: Mapping[str, Any]) -> BodyBudget:
        """From ``[gateway]``: ``bodyBudget`` (bytes) and ``bodyTimeout`` (seconds)."""
        return cls(
            int(gateway.get("bodyBudget", BODY_BUDGET)),
            float(gateway.get("bodyTimeout", BODY_TIMEOUT)),
        )

    def take(self, hold: Hold, size: int) -> Refusal | None:
        """Reserve ``size`` more bytes for ``hold`` (and count it in flight); the refusal when
        they do not fit. A body alone in its budget always fits: its route bounds it."""
        with self.lock:
            if hold.released:
                return None
            mine = self.by_key.get(hold.key, 0) if hold.key is not None else 0
            if mine > hold.reserved and mine + size > self.share:
                return Refusal(
                    429,
                    "Too Many Requests",
                    f"request bodies of this credential in flight exceed its {self.share} bytes: "
                    f"retry after {RETRY_AFTER} s",
                    RETRY_AFTER,
                )
            if self.used > hold.reserved and self.used + size > self.limit:
                self._cut_stalled(self.used + size - self.limit)
                if self.used > hold.reserved and self.used + size > self.limit:
                    return Refusal(
                        503,
                        "Service Unavailable",
                        f"request bodies in flight fill the server's {self.limit} bytes: "
                        f"retry after {RETRY_AFTER} s",
                        RETRY_AFTER,
                    )
            hold.reserved += size
            self.used += size
            self.peak = max(self.peak, self.used)
            if hold.key is not None:
                self.by_key[hold.key] = mine + size
            self.holds.add(hold)
            return None

    def release(self, hold: Hold) -> None:
        with self.lock:
            self._release(hold)

    def _release(self, hold: Hold) -> None:
        if hold.released:
            return
        hold.released = True
        self.holds.discard(hold)
        self.used -= hold.reserved
        if hold.key is not None:
            left = self.by_key.get(hold.key, 0) - hold.reserved
            if left > 0:
                self.by_key[hold.key] = left
            else:
                self.by_key.pop(hold.key, None)
        if not self.holds and self.peak >= TRIM_AFTER and self.trimming is None:
            self.trimming = threading.Timer(TRIM_DELAY, self.trim)
            self.trimming.daemon = True
            self.trimming.start()

    def trim(self) -> None:
        """Have the allocator return its free memory, when no body arrived since the burst
        ended (else the next end of one does it)."""
        with self.lock:
            self.trimming = None
            if self.holds:
                return
            self.peak = 0
        malloc_trim = _malloc_trim()
        if malloc_trim is not None:
            malloc_trim(0)

    def _cut_stalled(self, needed: int) -> None:
        """Release the bodies that received nothing for ``STALLED`` seconds, stalest first,
        until ``needed`` bytes are free, and have their connections cut (on their loops)."""
        now = time.monotonic()
        stalled = sorted(
            (
                h
                for h in self.holds
                if h.reserved and not h.complete and now - h.last_byte >= STALLED
            ),
            key=lambda h: h.last_byte,
        )
        for hold in stalled:
            if needed <= 0:
                break
            needed -= hold.reserved
            self._release(hold)
            hold.protocol.loop.call_soon_threadsafe(hold.protocol.cut, hold)

    def snapshot(self) -> dict[str, Any]:
        """Bodies and bytes in flight, and how many of them stalled (``/control/health``)."""
        now = time.monotonic()
        with self.lock:
            stalled = sum(1 for h in self.holds if not h.complete and now - h.last_byte >= STALLED)
            return {
                "bodies": len(self.holds),
                "bytes": self.used,
                "budget": self.limit,
                "stalled": stalled,
            }


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, from the C library the interpreter runs on (None elsewhere:
    musl returns freed memory by itself)."""
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


class RefusalLog:
    """One warning per kind of refusal every ``REFUSALS_LOGGED_EVERY`` seconds, saying how
    many more there were: a flood of refused requests must not flood the log."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}
        self.unlogged: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()

    def note(self, refusal: Refusal, what: str) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(refusal.status, -REFUSALS_LOGGED_EVERY) < REFUSALS_LOGGED_EVERY:
                self.unlogged[refusal.status] += 1
                return
            self.last[refusal.status] = now
            more = self.unlogged.pop(refusal.status, 0)
        log.warning(
            "HTTP %d for %s: %s%s",
            refusal.status,
            what,
            refusal.message,
            f" ({more} more since the last such line)" if more else "",
        )


@dataclass
class Limits:
    """One server's bounds, shared by its connections (``idle``: oldest first; ``closing``:
    closed by us, ``connection_lost`` still to come). ``budget`` is the process's, shared with
    its other servers; ``routes`` the app's ``body_limits``."""

    max_connections: int = 1000
    header_timeout: float = 10.0
    max_header_bytes: int = MAX_HEADER_BYTES
    budget: BodyBudget = field(default_factory=BodyBudget)
    routes: Mapping[str, BodyLimit] = field(default_factory=lambda: dict(BODY_LIMITS))
    idle: dict[GuardedProtocol, None] = field(default_factory=dict)
    closing: set[GuardedProtocol] = field(default_factory=set)  # closed, not yet lost
    # This server's bodies being received, and the timer looking for those past their deadline
    # (one per server while there are any, rather than one per request).
    receiving: set[Hold] = field(default_factory=set)
    sweeper: Any = None

    @classmethod
    def of(cls, gateway: Mapping[str, Any], budget: BodyBudget | None = None) -> Limits:
        """From ``[gateway]``: ``maxConnections`` (held under half the process's file
        descriptor limit, which the store, sandboxes and logs share) and ``headerTimeout``;
        ``budget`` the process's (a new one from ``[gateway]`` when None)."""
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
        return cls(
            max_connections=room,
            header_timeout=timeout,
            budget=budget if budget is not None else BodyBudget.of(gateway),
        )

    def body_limit(self, path: str) -> int:
        """What the route at ``path`` takes: the longest key of ``routes`` naming it (the path
        itself or a path it is under, or a prefix ending in "/"), looked up from the longest
        of the path's heads down."""
        routes = self.routes
        limit = routes.get(path)
        end = len(path)
        while limit is None and end > 0:
            end = path.rfind("/", 0, end)
            if end < 0:
                break
            limit = routes.get(path[: end + 1])
            if limit is None and end:
                limit = routes.get(path[:end])
        if limit is None:
            return DEFAULT_BODY_LIMIT
        return limit(path) if callable(limit) else limit

    def receive(self, hold: Hold, loop: Any) -> None:
        """Watch ``hold``'s deadline until its body is received whole (then it leaves
        ``receiving``)."""
        self.receiving.add(hold)
        if self.sweeper is None:
            self.sweeper = loop.call_later(SWEEP, self._sweep, loop)

    def _sweep(self, loop: Any) -> None:
        now = time.monotonic()
        for hold in [hold for hold in self.receiving if hold.deadline <= now]:
            self.receiving.discard(hold)
            hold.protocol.body_too_slow(hold)
        self.sweeper = loop.call_later(SWEEP, self._sweep, loop) if self.receiving else None


class Refused(Exception):
    """Raised in a parser callback to stop parsing a request the protocol answers itself."""


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline, a header size limit, body limits
    and budgets, a body deadline, and a place in its server's connection cap (``Limits``)."""

    def __init__(self, *args: Any, limits: Limits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.header_bytes = self.raw_bytes = 0
        self.reading_headers = True
        self.refusal: Refusal | None = None  # set in a parser callback that refused
        self.refused_body = False  # ... while receiving a body (else: a new request)
        self.deadline: Any = None  # the header timer (asyncio.TimerHandle)
        # The bodies of this connection's requests whose answers are still to complete, and
        # the one being received.
        self.holds: collections.deque[Hold] = collections.deque()
        self.receiving: Hold | None = None
        self.lingering: Any = None  # the timer ending a refused connection's linger
        self.lingered = 0

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
        if self.lingering is not None:
            self.lingering.cancel()
        self._release_all()
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
            self._answer(
                Refusal(408, "Request Timeout", "request headers not received in time"), False
            )

    # --------------------------------------------------------------- parsing
    # Two counts of header bytes: the parsed request line and headers (exact, known once they
    # are complete), and the raw bytes received while they are incomplete (one huge header is
    # buffered by the parser until it ends, so the exact count would come too late).
    def data_received(self, data: bytes) -> None:
        """uvicorn's, but a request refused here is answered as such (not logged as an invalid
        one), and a refused connection's further bytes are discarded unparsed."""
        if self.lingering is not None:
            self.lingered += len(data)
            if self.lingered > LINGER_BYTES:
                self._drop()
            return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self.refusal is not None:
                self._answer(self.refusal, self.refused_body)
            else:
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
            return
        if self.reading_headers and not self.transport.is_closing():
            self.raw_bytes += len(data)
            if self.raw_bytes > self.limits.max_header_bytes:
                self._answer(self._headers_too_large(), False)

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
            self._refuse(self._headers_too_large())
        hold = self._admit()
        before = self.cycle
        super().on_headers_complete()
        if hold is None:
            return
        if self.cycle is before:  # not an HTTP request after all (an upgrade)
            self.limits.budget.release(hold)
            return
        hold.cycle = self.cycle
        self.holds.append(hold)
        self.receiving = hold
        # Until the body is received whole, an answer closes the connection (the rest of the
        # body is never read); then the connection is kept as the client asked.
        hold.keep_alive, self.cycle.keep_alive = self.cycle.keep_alive, False
        self.limits.receive(hold, self.loop)

    def _refuse(self, refusal: Refusal, in_body: bool = False) -> None:
        self.refusal, self.refused_body = refusal, in_body
        raise Refused  # stops the parser: ``data_received`` answers

    def _headers_too_large(self) -> Refusal:
        limit = self.limits.max_header_bytes
        return Refusal(
            431, "Request Header Fields Too Large", f"request headers larger than {limit} bytes"
        )

    def _date_header(self) -> None:
        """The ``Date`` header of this second in the server's default headers (uvicorn's
        server wakes each second to renew it; ours sleeps until it is stopped)."""
        now = int(time.time())
        state = self.server_state
        if getattr(state, "date_second", None) != now:
            state.date_second = now
            date = (b"date", formatdate(now, usegmt=True).encode())
            state.default_headers = [date, *self.config.encoded_headers]

    # --------------------------------------------------------------- bodies
    def _admit(self) -> Hold | None:
        """The request's place in the body budget (None when it has no body), or a refusal
        (raised) when its route does not take its declared size or the budget has no room."""
        length, chunked, key = None, False, None
        for name, value in self.headers:
            if name == b"content-length":
                length = int(value) if value.isdigit() else None
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"authorization":
                key = value
        if not length and not chunked:
            return None
        path = httptools.parse_url(self.url).path.decode("ascii")  # as uvicorn gives the app
        path = unquote(path) if "%" in path else path
        limit = self.limits.body_limit(path)
        if length is not None and length > limit:
            self._refuse(too_large(limit, path))
        now = time.monotonic()
        hold = Hold(self, None, key, limit, path, now, now + self.limits.budget.timeout)
        refusal = self.limits.budget.take(hold, length or 0)
        if refusal is not None:
            self._refuse(refusal)
        return hold

    def on_body(self, body: bytes) -> None:
        hold = self.receiving
        if hold is not None and not hold.released:
            hold.received += len(body)
            hold.last_byte = time.monotonic()
            if hold.received > hold.limit:
                self._refuse(too_large(hold.limit, hold.path), in_body=True)
            if hold.received > hold.reserved:
                more = max(hold.received - hold.reserved, min(GRANULE, hold.limit - hold.reserved))
                refusal = self.limits.budget.take(hold, more)
                if refusal is not None:
                    self._refuse(refusal, in_body=True)
        super().on_body(body)

    def on_message_complete(self) -> None:
        hold = self.receiving
        if hold is not None:
            self.receiving = None
            hold.complete = True
            self.cycle.keep_alive = hold.keep_alive
            self.limits.receiving.discard(hold)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        while self.holds and self.holds[0].cycle.response_complete:
            self._release(self.holds.popleft())
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # kept alive, no pipelined request next
            self._become_idle()  # uvicorn's keep-alive timeout closes it later

    def _release(self, hold: Hold) -> None:
        if hold is self.receiving:
            self.receiving = None
            self.limits.receiving.discard(hold)
        self.limits.budget.release(hold)

    def _release_all(self) -> None:
        while self.holds:
            self._release(self.holds.popleft())

    def body_too_slow(self, hold: Hold) -> None:
        """``hold``'s body did not come whole by its deadline (``Limits`` looked)."""
        if not hold.complete and hold.cycle is self.cycle and not hold.cycle.response_complete:
            timeout = self.limits.budget.timeout
            message = f"request body not received within {timeout:g} s"
            self._answer(Refusal(408, "Request Timeout", message), True)

    def cut(self, hold: Hold) -> None:
        """Cut a stalled body its budget released to make room (on this connection's loop)."""
        cycle = hold.cycle
        if cycle is self.cycle and not cycle.response_complete and not self.transport.is_closing():
            message = "request body stalled while the server was full"
            self._answer(Refusal(408, "Request Timeout", message), True)

    # --------------------------------------------------------------- answering
    def _answer(self, refusal: Refusal, in_body: bool) -> None:
        """Answer ``refusal`` in place of the app, for the request whose body is being received
        (``in_body``) or a new one: the app stops (its ``receive`` says the client left) and
        what it sends is dropped. A refusal (not a 408) then lingers."""
        cycle = self.cycle
        busy = cycle is not None and not cycle.response_complete
        if busy and (cycle.response_started or not in_body):
            # An answer is under way (or a pipelined request refused): none can follow it.
            self._drop()
            return
        if busy:
            cycle.disconnected = True
            cycle.message_event.set()
        self._release_all()
        self.limits.budget.refusals.note(refusal, self._what())
        self.transport.write(refusal.raw())
        if refusal.status == 408:
            self._drop()
        else:
            self._linger()

    def _what(self) -> str:
        """The refused request, for the log: its method, path (no query) and client."""
        method = "" if self.reading_headers else self.parser.get_method().decode("latin-1") + " "
        url = getattr(self, "url", b"")  # uvicorn sets it when a request begins
        path = url.split(b"?", 1)[0][:200].decode("latin-1", "replace")
        client = f" from {self.client[0]}" if self.client else ""
        return f"{method}{path or 'a request'}{client}"

    def _linger(self) -> None:
        """Stop answering this connection: half-close it, discard what the client still sends
        for ``LINGER_SECONDS`` at most, then close. It counts as idle (first to go at the cap)."""
        self.lingering = self.loop.call_later(LINGER_SECONDS, self._drop)
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._become_idle()

"""Who may see and change what on the dashboard.

Reading (pages and ``GET /api/...``) is open to *local* requests, else it needs the control
token: the ``al_token`` cookie that ``/login`` sets, or an ``Authorization: Bearer`` header. A
request is local when its client is 127.0.0.1 or ::1 **and** its ``Host`` header names
localhost, 127.0.0.1 or ::1, so a DNS-rebinding page (``evil.example`` resolved to 127.0.0.1)
is not taken for local.

Changing (``POST``) needs one of:
- a valid ``Authorization: Bearer`` header: browsers never add it on their own, so it cannot be
  forged cross-site and needs no CSRF token (scripts and ``curl`` use this);
- a CSRF token (form field ``csrf`` or header ``X-CSRF-Token``) bound to the browser's
  ``al_session`` cookie by an HMAC keyed with the control token, checked in constant time, plus
  either a local request or a valid ``al_token`` cookie. When an ``Origin`` header is sent it must
  also be this server's own origin.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from llamaherd.api import authorized
from llamaherd.api import is_local as local_client

SESSION_COOKIE = "al_session"
TOKEN_COOKIE = "al_token"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
FORM_TYPE = "application/x-www-form-urlencoded"
# Host names a local request may use; any other name (a DNS-rebound one, or 127.0.0.2) needs
# the token, whatever the client address.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_SESSION_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,64}")


def _local_host(host: str) -> bool:
    return (urlsplit(f"//{host}").hostname or "") in LOCAL_NAMES


def is_local(request: Request) -> bool:
    """A client on 127.0.0.1/::1 that also asked for one of ``LOCAL_NAMES``."""
    return local_client(request) and _local_host(request.headers.get("host", ""))


def may_read(request: Request) -> bool:
    return is_local(request) or authorized(request)


def signed_in(request: Request) -> bool:
    """True when the browser holds a valid ``al_token`` cookie (it may sign out)."""
    return TOKEN_COOKIE in request.cookies and authorized(request)


def _has_bearer(request: Request) -> bool:
    return request.headers.get("authorization", "").lower().startswith("bearer ")


def session_of(request: Request) -> str | None:
    """The browser's session id from its cookie, if it has a well-formed one."""
    value = request.cookies.get(SESSION_COOKIE, "")
    return value if _SESSION_SHAPE.fullmatch(value) else None


def new_session() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(request: Request, session: str) -> str:
    """The CSRF token of ``session``: only this server (it holds the control token) can make it."""
    key = request.app.state.control_token.encode()
    return hmac.new(
        key, b"llamaherd-dashboard-csrf\0" + session.encode(), hashlib.sha256
    ).hexdigest()


def set_session_cookie(request: Request, response: Response, session: str) -> None:
    # Lax, not Strict: it is no credential, only what CSRF tokens are bound to, and Strict would
    # replace it (voiding other tabs' tokens) whenever the dashboard is opened from a link.
    response.set_cookie(
        SESSION_COOKIE, session, httponly=True, samesite="lax", secure=request.url.scheme == "https"
    )


def set_token_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by every browser on same-origin form posts
        return True
    return origin == f"{request.url.scheme}://{request.headers.get('host', '')}"


async def form_fields(request: Request) -> dict[str, str]:
    """The fields of a url-encoded form post (what the dashboard's forms send), else {}."""
    if not request.headers.get("content-type", "").startswith(FORM_TYPE):
        return {}
    body = await request.body()  # cached by Starlette, so handlers may read it again
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


async def csrf_refusal(request: Request) -> str | None:
    """Why this browser request fails the CSRF check (None when it passes)."""
    if not _same_origin(request):
        return "cross-origin request refused"
    session = session_of(request)
    given = request.headers.get(CSRF_HEADER)
    if given is None:
        given = (await form_fields(request)).get(CSRF_FIELD, "")
    if not session or not hmac.compare_digest(
        given.encode(), csrf_token(request, session).encode()
    ):
        return "CSRF token missing or wrong (reload the page and try again)"
    return None


async def mutation_refusal(request: Request) -> tuple[int, str] | None:
    """(status, reason) when a mutating request must be refused, else None."""
    if _has_bearer(request):
        return None if authorized(request) else (401, "control token required")
    if not may_read(request):
        return 401, "control token required"
    reason = await csrf_refusal(request)
    return None if reason is None else (403, reason)

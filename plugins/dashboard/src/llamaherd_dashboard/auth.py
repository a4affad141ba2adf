"""Who may see and change what on the dashboard.

Nothing is open, not even to local processes: another OS user (an agent's sandbox user among
them) can connect from 127.0.0.1 too. Reading and changing need one of:

- an ``Authorization: Bearer <control token>`` header (scripts, ``curl``): browsers never add
  it on their own, so it cannot be forged cross-site and needs no CSRF token;
- a signed-in browser session: ``/login`` takes the control token (``.al/control-token``) or
  the dashboard password (``password``: an scrypt verifier in ``.al/dashboard-password``)
  once and sets the ``al_auth`` cookie, an HMAC (keyed with the control token) of the
  browser's ``al_session`` id and an expiry. It proves the sign-in without holding the token;
  the sign-in is also kept server-side (``sessions``), so it dies with a sign-out, its expiry
  or a new control token. Wrong sign-ins are throttled per client and in all (``password``). A
  browser's changes also need its CSRF token (form field
  ``csrf`` or header ``X-CSRF-Token``), HMAC-bound to the same session; an ``Origin`` header,
  when sent, must be this server's own.

Every request must also name a host this server answers to (``allowed_host``): a local client
one of ``LOCAL_NAMES`` (so a DNS-rebinding page is refused), any client the host of
``[gateway] url`` or the address of ``[gateway] bind`` when it is not a wildcard.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from llamaherd.api import authorized, token_matches
from llamaherd.api import is_local as local_client
from llamaherd_dashboard.password import SignInThrottle, load_verifier, matches
from llamaherd_dashboard.sessions import Sessions

SESSION_COOKIE = "al_session"
AUTH_COOKIE = "al_auth"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
FORM_TYPE = "application/x-www-form-urlencoded"
SESSION_SECONDS = 7 * 86400  # how long one sign-in lasts
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("", "0.0.0.0", "::")
_SESSION_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,64}")


def _hostname(value: str) -> str:
    return (urlsplit(f"//{value}").hostname or "").lower()


def served_names(request: Request) -> set[str]:
    """Host names a non-local client may use: ``[gateway] url``'s host and a specific bind."""
    project = request.app.state.engine.project
    names = {str(project.gateway.get("bind") or "").strip("[]").lower()} - set(WILDCARDS)
    if project.public_url:
        names.add((urlsplit(project.public_url).hostname or "").lower())
    return names - {""}


def allowed_host(request: Request) -> bool:
    """Whether the ``Host`` header names this server for this client (see the module doc)."""
    host = _hostname(request.headers.get("host", ""))
    names = served_names(request)
    if local_client(request):
        names |= set(LOCAL_NAMES)
    return host in names


def _has_bearer(request: Request) -> bool:
    return request.headers.get("authorization", "").lower().startswith("bearer ")


def session_of(request: Request) -> str | None:
    """The browser's session id from its cookie, if it has a well-formed one."""
    value = request.cookies.get(SESSION_COOKIE, "")
    return value if _SESSION_SHAPE.fullmatch(value) else None


def new_session() -> str:
    return secrets.token_urlsafe(32)


def _mac(request: Request, purpose: str, message: str) -> str:
    key = request.app.state.control_token.encode()
    data = f"llamaherd-dashboard-{purpose}\0{message}".encode()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def csrf_token(request: Request, session: str) -> str:
    """The CSRF token of ``session``: only this server (it holds the control token) can make it."""
    return _mac(request, "csrf", session)


def auth_value(request: Request, session: str, expires: int) -> str:
    return f"{expires}.{_mac(request, 'auth', session + chr(0) + str(expires))}"


def signed_in(request: Request) -> bool:
    """True when the browser's ``al_auth`` cookie proves a sign-in of its session, unexpired
    and not signed out."""
    session = session_of(request)
    expires, _, _ = request.cookies.get(AUTH_COOKIE, "").partition(".")
    if not session or not expires.isdigit() or int(expires) < time.time():
        return False
    given = request.cookies.get(AUTH_COOKIE, "")
    proven = auth_value(request, session, int(expires)).encode()
    return hmac.compare_digest(given.encode(), proven) and _sessions(request).is_open(session)


def _sessions(request: Request) -> Sessions:
    state = request.app.state
    if getattr(state, "dashboard_sessions", None) is None:
        state.dashboard_sessions = Sessions(state.engine.store)
    return state.dashboard_sessions


def may_read(request: Request) -> bool:
    if not allowed_host(request):
        return False
    return authorized(request) if _has_bearer(request) else signed_in(request)


def password_matches(request: Request, given: str) -> bool:
    """``given`` is the control token, or the dashboard password (checked against its scrypt
    verifier; blocking: call it off the event loop)."""
    if token_matches(request, given):
        return True
    verifier = load_verifier(request.app.state.engine.project.state_dir)
    if verifier is None or not given:
        return False
    with throttle(request).checks:  # each check costs 32 MiB for a moment: a few at a time
        return matches(verifier, given)


def throttle(request: Request) -> SignInThrottle:
    state = request.app.state
    if getattr(state, "sign_in_throttle", None) is None:
        state.sign_in_throttle = SignInThrottle()
    return state.sign_in_throttle


def client_of(request: Request) -> str:
    return request.client.host if request.client else "-"


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(request: Request, response: Response, session: str) -> None:
    # Lax, not Strict: Strict would drop it when the dashboard is opened from a link, and the
    # page would then look signed out.
    response.set_cookie(
        SESSION_COOKIE, session, httponly=True, samesite="lax", secure=_secure(request)
    )


def sign_in(request: Request, response: Response) -> None:
    """A fresh session (never one handed out before the sign-in) with its ``al_auth`` proof,
    kept server-side too (blocking: call it off the event loop)."""
    session = new_session()
    expires = int(time.time()) + SESSION_SECONDS
    _sessions(request).open(session, expires)
    set_session_cookie(request, response, session)
    response.set_cookie(
        AUTH_COOKIE,
        auth_value(request, session, expires),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
    )


def sign_out(request: Request, response: Response) -> None:
    """End the browser's sign-in server-side (a copy of its cookie proves nothing from now
    on) and drop the cookie (blocking: call it off the event loop)."""
    session = session_of(request)
    if session is not None:
        _sessions(request).close(session)
    response.delete_cookie(AUTH_COOKIE, httponly=True, samesite="lax")


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
    if not may_read(request):
        return 401, "sign in (control token or dashboard password) required"
    if _has_bearer(request):
        return None
    reason = await csrf_refusal(request)
    return None if reason is None else (403, reason)

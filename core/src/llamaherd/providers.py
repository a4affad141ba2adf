"""What provider plugins share: the model-key credential type and the HTTP plumbing that turns
a model API's replies into a ``Reply`` or a classified ``ProviderError``.

``post_json`` posts with this thread's ``requests`` session and classifies failures
(``http_error``: the provider's own verdict first, then 401/403 -> AuthError, 404 ->
Unavailable, 429 -> RateLimited with its retry-after, 408/5xx -> Transient, else Fatal), never
naming the URL or a secret in the message. A provider gives its verdict with ``classify(status,
body)``, returning the ProviderError class a reply means for it (OpenRouter's 402: out of
credits, so Unavailable) or None for the default.

A call made inside ``Abort.guard()`` can be cut off from another thread: ``Abort.fire()`` shuts
down the sockets the call is using, so the blocked read fails at once, the server sees the
connection close (and stops generating), and ``post_json`` raises ``Aborted``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from llamaherd.errors import (
    Aborted,
    AuthError,
    Fatal,
    ProviderError,
    RateLimited,
    Transient,
    Unavailable,
)
from llamaherd.types import CredentialField, ModelConfig

# Set as a ToolCall's only argument when the model sent arguments that are not a JSON object;
# the value says what was wrong, so the session can hand the model an error result.
INVALID_ARGUMENTS = "__invalid_arguments__"


class ModelKey:
    """Credential type of a model API key: one secret ``token`` field. Only the scheduler reads
    it to call the model, so it is never staged into a sandbox (``sandbox = False``)."""

    sandbox = False

    def __init__(self, name: str, description: str, token_description: str):
        self.name = name
        self.description = description
        self.fields = [CredentialField("token", secret=True, description=token_description)]

    def env(self, values: dict[str, str], path: Any) -> dict[str, str]:
        return {}

    def context(self, values: dict[str, str]) -> str:
        return ""


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """Remove each secret (keys, base URLs) from ``text``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # costs ~15 ms: only when a server sends a date

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_detail(body: str) -> tuple[str, str]:
    """(type or code, message) from an error body in any of the usual shapes."""
    import json

    try:
        data = json.loads(body)
    except ValueError:
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    err = data.get("error", data)
    if isinstance(err, str):
        return "", err
    if not isinstance(err, dict):
        return "", ""
    kind = err.get("type") or err.get("code") or ""
    message = err.get("message") or err.get("detail") or ""
    return str(kind), str(message)


def body_retry_delay(body: str) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"retryDelay": "37s"``) in an error
    body: Google's APIs say when to come back there rather than in a header."""
    import json

    try:
        details = json.loads(body)["error"]["details"]
    except (ValueError, KeyError, TypeError):
        return None
    for detail in details if isinstance(details, list) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return max(0.0, float(delay[:-1]))
            except ValueError:
                return None
    return None


def default_class(status: int) -> type[ProviderError]:
    """The error class an HTTP status means when the provider has no verdict of its own."""
    if status in (401, 403):
        return AuthError
    if status == 404:
        return Unavailable
    if status == 429:
        return RateLimited
    if status == 408 or status >= 500:
        return Transient
    return Fatal


def http_error(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: str,
    secrets: Iterable[str | None],
    kind: type[ProviderError] | None = None,
) -> ProviderError:
    """The ProviderError for an HTTP error reply: ``kind`` when the provider has classified it
    (``classify``), else by status. Its message names the provider, the status and the
    server's scrubbed explanation, except for AuthError, whose message is fixed."""
    kind = kind or default_class(status)
    code, message = error_detail(body)
    detail = scrub(f"{code}: {message}" if code else message, secrets)[:300]
    where = f"{provider}: HTTP {status}" + (f" ({detail})" if detail else "")
    if kind is AuthError:
        # The server's text may quote the key; a fixed message is enough to act on.
        return AuthError(f"{provider}: the key was refused (HTTP {status}); check the credential")
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = body_retry_delay(body)
    if kind is RateLimited:
        return RateLimited(where, retry_after=retry_after)
    error = kind(where)
    if isinstance(error, Transient) and not isinstance(error, Unavailable):
        error.retry_after = retry_after  # 503/529 may say when to come back
    return error


Classify = Callable[[int, str], "type[ProviderError] | None"]


def no_verdict(status: int, body: str) -> type[ProviderError] | None:
    return None


_local = threading.local()


class Abort:
    """A switch another thread flips to cut off the model calls one thread makes.

    ``with abort.guard():`` marks the calling thread's ``post_json`` calls as this abort's: each
    HTTP connection such a call takes from the pool is tracked until the call ends. ``fire()``
    (from any thread) shuts those sockets down; a call started after it raises ``Aborted`` before
    sending. ``reset()`` re-arms it for the next call (a turn interrupted by a message is
    followed by another)."""

    def __init__(self) -> None:
        self._fired = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[Any] = set()

    @property
    def fired(self) -> bool:
        return self._fired.is_set()

    def fire(self) -> None:
        self._fired.set()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shut(connection)

    def reset(self) -> None:
        self._fired.clear()

    @contextlib.contextmanager
    def guard(self) -> Iterator[Abort]:
        previous = getattr(_local, "abort", None)
        _local.abort = self
        try:
            yield self
        finally:
            _local.abort = previous
            with self._lock:
                self._connections.clear()  # back in the pool: never shut down a later call's

    def track(self, connection: Any) -> None:
        with self._lock:
            self._connections.add(connection)
        if self.fired:  # fired while the pool handed it out
            _shut(connection)


def _shut(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _tracking_pools() -> dict[str, type]:
    """urllib3 pool classes that hand each connection they lend to the thread's Abort."""
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Tracking:
        def _get_conn(self, timeout: float | None = None) -> Any:
            connection = super()._get_conn(timeout)  # type: ignore[misc]
            abort = getattr(_local, "abort", None)
            if abort is not None:
                abort.track(connection)
            return connection

    return {
        "http": type("TrackingHTTPConnectionPool", (Tracking, HTTPConnectionPool), {}),
        "https": type("TrackingHTTPSConnectionPool", (Tracking, HTTPSConnectionPool), {}),
    }


def http_session() -> Any:
    """This thread's ``requests.Session``. A run's session loop lives in one thread, so this is
    a Session per run (kept for the thread's next run: connections are reused) and never shared
    between threads, which ``requests`` does not support. Its connections can be cut off by an
    ``Abort`` guarding the call."""
    session = getattr(_local, "session", None)
    if session is None:
        import requests

        session = _local.session = requests.Session()
        pools = _tracking_pools()
        for adapter in session.adapters.values():
            adapter.poolmanager.pool_classes_by_scheme = pools
    return session


def post_json(
    provider: str,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    *,
    timeout: tuple[float, float],
    secrets: Iterable[str | None],
    classify: Classify = no_verdict,
) -> dict[str, Any]:
    """POST ``body`` as JSON and return the JSON object answered, or raise a ProviderError
    whose message names ``provider`` and never the URL or the secrets. ``classify(status,
    body)`` is the provider's own verdict on an error reply (see the module docstring)."""
    import requests

    secrets = list(secrets)
    abort = getattr(_local, "abort", None)
    if abort is not None and abort.fired:
        raise Aborted(f"{provider}: call cut off before it was sent")
    try:
        response = http_session().post(url, json=body, headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        if abort is not None and abort.fired:
            raise Aborted(f"{provider}: call cut off (connection closed by llamaherd)") from None
        if isinstance(exc, requests.Timeout):
            raise Transient(f"{provider}: request timed out") from None
        if isinstance(exc, requests.ConnectionError):
            raise Transient(f"{provider}: connection failed") from None
        raise Fatal(f"{provider}: request failed ({type(exc).__name__})") from None
    if abort is not None and abort.fired:  # the reply arrived as it was cut off: not wanted
        raise Aborted(f"{provider}: call cut off (connection closed by llamaherd)")
    status = response.status_code
    if status >= 400:
        text = response.text
        raise http_error(provider, status, response.headers, text, secrets, classify(status, text))
    try:
        data = response.json()
    except ValueError:
        raise Fatal(f"{provider}: reply is not JSON (HTTP {status})") from None
    if not isinstance(data, dict):
        raise Fatal(f"{provider}: reply is not a JSON object (HTTP {status})")
    return data


def http_timeout(model: ModelConfig, read: float = 300.0) -> tuple[float, float]:
    """(connect, read) timeouts; ``timeout`` in the model table overrides the read timeout."""
    return (10.0, float(model.extra.get("timeout", read)))

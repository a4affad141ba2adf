"""Webhook signature checks that every source shares: HMAC digests, constant-time comparison
against every configured secret, and timestamp freshness (replay windows).

A source verifies before it parses anything: ``signature_matches`` compares the given value
with the expected one of *every* secret, so the time taken reveals neither which secret
matched nor how much of a guess was right.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

DEFAULT_TOLERANCE = 300.0  # seconds a signed timestamp may be off (Slack's and Linear's window)


def hmac_digest(
    secret: str | bytes, message: bytes, *, encoding: str = "hex", digest: str = "sha256"
) -> str:
    """HMAC of ``message`` keyed with ``secret``, as ``hex`` (lower case) or ``base64``."""
    key = secret.encode() if isinstance(secret, str) else secret
    mac = hmac.new(key, message, getattr(hashlib, digest)).digest()
    if encoding == "hex":
        return mac.hex()
    if encoding == "base64":
        return base64.b64encode(mac).decode()
    raise ValueError(f"encoding: expected 'hex' or 'base64', got {encoding!r}")


def signature_matches(given: str, expected: Iterable[str]) -> bool:
    """Whether ``given`` equals any of ``expected``, comparing against all in constant time.
    An empty ``given`` never matches."""
    given_bytes = given.strip().encode("utf-8", "replace")
    ok = False
    for candidate in expected:
        ok |= hmac.compare_digest(candidate.encode(), given_bytes)
    return bool(given_bytes) and ok


def fresh(timestamp: str | float | None, now: float, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """Whether a signed ``timestamp`` (epoch seconds, or milliseconds when it looks like them)
    is within ``tolerance`` seconds of ``now``; a missing or malformed one is not fresh."""
    try:
        value = float(timestamp)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    if value > 1e11:  # milliseconds (Linear's webhookTimestamp)
        value /= 1000.0
    return abs(now - value) <= tolerance

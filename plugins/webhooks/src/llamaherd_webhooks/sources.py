"""The ``generic`` webhook source (HMAC-SHA256 of the raw body, header names configurable) and
its ``webhook_secret`` credential type.

With ``timestampHeader`` set, a sender signs ``<delivery id>.<timestamp>.<raw body>`` (the
Standard Webhooks scheme) and a delivery whose timestamp is more than ``timestampTolerance``
seconds off is refused: a captured delivery can then be replayed neither later nor under a new
delivery id (the id is signed, and a repeated id is a duplicate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaherd.api import DEFAULT_TOLERANCE, CredentialField, HmacSource, clock, fresh


class GenericSource(HmacSource):
    """Any sender signing the raw body with HMAC-SHA256 (hex), header names set per table."""

    name = "generic"
    description = "Any sender signing the raw body with HMAC-SHA256 (hex) in a header."
    credential_type = "webhook_secret"
    # Senders differ: "sha256=<hex>" and the bare hex are both taken.
    signature_prefix_optional = True
    schema: dict[str, Any] = {
        "signatureHeader": {"type": "string", "default": "X-Signature-256"},
        "deliveryHeader": {"type": "string", "default": "X-Delivery-Id"},
        "eventHeader": {"type": "string", "default": "X-Event"},
        "eventField": {
            "type": "string",
            "default": "event",
            "description": "Dotted payload path of the event name when no header is sent.",
        },
        "timestampHeader": {
            "type": "string",
            "description": "Header with the send time (epoch seconds). When set, the signature "
            "covers `<delivery id>.<timestamp>.<body>` and stale deliveries are refused.",
        },
        "timestampTolerance": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": DEFAULT_TOLERANCE,
            "description": "Seconds a signed timestamp may be off (with `timestampHeader`).",
        },
    }
    timestamp_header: str | None = None
    tolerance = DEFAULT_TOLERANCE

    def configured(self, config: dict[str, Any]) -> GenericSource:
        source = super().configured(config)
        assert isinstance(source, GenericSource)
        if "timestampHeader" in config:
            source.timestamp_header = str(config["timestampHeader"])
        source.tolerance = float(config.get("timestampTolerance", DEFAULT_TOLERANCE))
        return source

    def signed_message(self, headers: dict[str, str], body: bytes) -> bytes:
        if self.timestamp_header is None:
            return body
        delivery = headers.get(self.delivery_header.lower(), "")
        stamp = headers.get(self.timestamp_header.lower(), "")
        return f"{delivery}.{stamp}.".encode("utf-8", "replace") + body

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """The HMAC under one of ``secrets``, and, with ``timestampHeader``, a timestamp
        within ``timestampTolerance`` seconds of now."""
        if self.timestamp_header is not None:
            stamp = headers.get(self.timestamp_header.lower())
            if not fresh(stamp, clock(), self.tolerance):
                return False
        return super().verify(headers, body, secrets)

    def signed(self, headers: dict[str, str], body: bytes, secret: str | None) -> dict[str, str]:
        """What a sender adds: with ``timestampHeader``, the time of sending too."""
        if self.timestamp_header is not None and secret is not None:
            headers = {self.timestamp_header: str(int(clock())), **headers}
        return super().signed(headers, body, secret)


class WebhookSecret:
    """Credential type ``webhook_secret``: the shared secret of a generic webhook source."""

    name = "webhook_secret"
    description = "Shared secret that signs deliveries of a generic webhook source."
    fields = [CredentialField("secret", secret=True, description="HMAC-SHA256 key")]
    sandbox = False  # only the scheduler checks signatures: never staged into a run

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {}

    def context(self, values: dict[str, str]) -> str:
        return ""

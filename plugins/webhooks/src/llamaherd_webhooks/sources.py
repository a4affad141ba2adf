"""The ``generic`` webhook source (HMAC-SHA256 of the raw body, header names configurable) and
its ``webhook_secret`` credential type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaherd.api import CredentialField, HmacSource


class GenericSource(HmacSource):
    """Any sender signing the raw body with HMAC-SHA256 (hex), header names set per table."""

    name = "generic"
    description = "Any sender signing the raw body with HMAC-SHA256 (hex) in a header."
    credential_type = "webhook_secret"
    schema: dict[str, Any] = {
        "signatureHeader": {"type": "string", "default": "X-Signature-256"},
        "deliveryHeader": {"type": "string", "default": "X-Delivery-Id"},
        "eventHeader": {"type": "string", "default": "X-Event"},
        "eventField": {
            "type": "string",
            "default": "event",
            "description": "Dotted payload path of the event name when no header is sent.",
        },
    }


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

"""The ``generic`` webhook source (HMAC-SHA256 of the raw body) and its ``webhook_secret`` type.

``HmacSource`` is also the base of sources that differ only in header names and normalisation
(``llamaherd_github.source.GitHubSource``). Header dicts passed in have lower-cased names.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from llamaherd.types import CredentialField
from llamaherd_webhooks.matching import lookup

# [webhooks.<name>] keys a generic source accepts, and the attribute each sets.
GENERIC_KEYS = {
    "signatureHeader": "signature_header",
    "deliveryHeader": "delivery_header",
    "eventHeader": "event_header",
    "eventField": "event_field",
}


def body_digest(body: bytes) -> str:
    """Stand-in delivery id for senders that send none: the same body is the same delivery."""
    return hashlib.sha256(body).hexdigest()


def sign(body: bytes, secret: str) -> str:
    """Hex HMAC-SHA256 of ``body`` keyed with ``secret``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# Keys any source type accepts on top of core's type/credential/allowUnsigned.
COMMON_SCHEMA: dict[str, Any] = {
    "maxBodyBytes": {
        "type": "integer",
        "minimum": 1,
        "default": 1048576,
        "description": "Larger deliveries are refused with 413.",
    },
}


class HmacSource:
    """Deliveries signed with HMAC-SHA256 of the raw body, hex, optionally ``sha256=``-prefixed."""

    name = "generic"
    description = "Any sender signing the raw body with HMAC-SHA256 (hex) in a header."
    credential_type = "webhook_secret"
    schema: dict[str, Any] = {
        **COMMON_SCHEMA,
        "signatureHeader": {"type": "string", "default": "X-Signature-256"},
        "deliveryHeader": {"type": "string", "default": "X-Delivery-Id"},
        "eventHeader": {"type": "string", "default": "X-Event"},
        "eventField": {
            "type": "string",
            "default": "event",
            "description": "Dotted payload path of the event name when no header is sent.",
        },
    }
    signature_header = "X-Signature-256"
    signature_prefix = "sha256="
    delivery_header = "X-Delivery-Id"
    event_header = "X-Event"
    event_field = "event"

    def configured(self, config: dict[str, Any]) -> HmacSource:
        """A copy using the header names set in a ``[webhooks.<name>]`` table."""
        source = copy.copy(self)
        for key, attr in GENERIC_KEYS.items():
            if key in config and key in self.schema:
                setattr(source, attr, str(config[key]))
        return source

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """True when the signature header holds the body's HMAC under one of ``secrets``.
        Every secret is compared in constant time, so timing reveals nothing."""
        given = headers.get(self.signature_header.lower(), "").strip()
        if given.lower().startswith(self.signature_prefix):
            given = given[len(self.signature_prefix) :]
        given_bytes = given.lower().encode("utf-8", "replace")
        ok = False
        for secret in secrets:
            ok |= hmac.compare_digest(sign(body, secret).encode(), given_bytes)
        return bool(given) and ok

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """Normalised fields of a delivery; ValueError when the body is not a JSON object."""
        payload = self.load_json(headers, body)
        event = headers.get(self.event_header.lower()) or lookup(payload, self.event_field)
        fields = self.normalise(event if isinstance(event, str) else None, payload)
        fields["delivery"] = headers.get(self.delivery_header.lower()) or body_digest(body)
        return fields

    def load_json(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"body is not valid JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise ValueError("body must be a JSON object")
        return payload

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """Filterable fields; a generic sender may use GitHub-like keys or flat ones."""

        def pick(*paths: str) -> Any:
            for path in paths:
                value = lookup(payload, path)
                if isinstance(value, str | int) and not isinstance(value, bool):
                    return value
            return None

        labels = payload.get("labels")
        return {
            "event": event,
            "action": pick("action"),
            "repo": pick("repository.full_name", "repo"),
            "org": pick("organization.login", "org"),
            "sender": pick("sender.login", "sender"),
            "number": pick("number"),
            "ref": pick("ref"),
            "branch": pick("branch"),
            "labels": [str(label) for label in labels] if isinstance(labels, list) else [],
            "author": pick("author"),
            "conclusion": pick("conclusion"),
            "payload": payload,
        }

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """Headers a genuine sender would send with ``body`` (``al webhooks test``, tests)."""
        headers = {"Content-Type": "application/json", self.delivery_header: delivery}
        if event:
            headers[self.event_header] = event
        if secret is not None:
            headers[self.signature_header] = self.signature_prefix + sign(body, secret)
        return headers


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

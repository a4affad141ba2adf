"""The ``slack`` webhook source: Slack's Events API.

Slack signs ``v0:<X-Slack-Request-Timestamp>:<raw body>`` with the app's signing secret
(HMAC-SHA256, hex, ``v0=`` in ``X-Slack-Signature``) and asks receivers to refuse timestamps
more than five minutes off. A new Request URL is checked with a signed ``url_verification``
whose ``challenge`` must be echoed; events arrive as ``event_callback`` with a unique
``event_id``, which Slack keeps when it retries (``X-Slack-Retry-Num``), so a retry is a
duplicate here.
"""

from __future__ import annotations

import json
from typing import Any

from llamaherd.api import (
    HmacSource,
    WebhookFilter,
    WebhookReply,
    body_digest,
    clip,
    clock,
    fresh,
    json_object,
    pick,
)

TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
TOLERANCE = 300.0  # seconds: Slack's documented replay window
# Request types that are answered and never queued.
IGNORED = {"url_verification", "app_rate_limited"}


class SlackSource(HmacSource):
    """WebhookSource ``slack``."""

    name = "slack"
    description = "Slack Events API (X-Slack-Signature v0, url_verification answered)."
    credential_type = "slack_signing_secret"
    schema: dict[str, Any] = {}
    signature_header = "X-Slack-Signature"
    signature_prefix = "v0="
    filters = {
        "channels": WebhookFilter("channel", "Slack channel IDs (C0123...)."),
        "team_ids": WebhookFilter("team", "Slack workspace (team) IDs (T0123...)."),
        "users": WebhookFilter("sender", "Slack user IDs (U0123...) or bot IDs."),
    }

    def signed_message(self, headers: dict[str, str], body: bytes) -> bytes:
        stamp = headers.get(TIMESTAMP_HEADER.lower(), "")
        return b"v0:" + stamp.encode("utf-8", "replace") + b":" + body

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """A signature made within the last five minutes (so a captured request cannot be
        replayed later) under one of ``secrets``."""
        stamp = headers.get(TIMESTAMP_HEADER.lower())
        return fresh(stamp, clock(), TOLERANCE) and super().verify(headers, body, secrets)

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """An ``event_callback``'s fields; ``url_verification`` and ``app_rate_limited`` come
        back as ``ignore`` (answered, never queued), any other type or a callback without its
        ``event`` with ``lacks`` (acknowledged, routed nowhere, as Action Llama does). Slash
        commands and interactivity (form-encoded bodies) are not the Events API: refused as
        bad requests."""
        payload = self.load_json(headers, body)
        kind = payload.get("type")
        unrouted = {
            "event": kind if isinstance(kind, str) else None,
            "delivery": body_digest(body),
            "payload": payload,
        }
        if kind in IGNORED:
            return {**unrouted, "ignore": True}
        if kind != "event_callback":
            return {**unrouted, "lacks": f"event_callback (type {kind!r})"}
        if not isinstance(payload.get("event"), dict):
            return {**unrouted, "lacks": "event"}
        fields = self.normalise(None, payload)
        fields["delivery"] = pick(payload, "event_id") or body_digest(body)
        return fields

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        inner = payload["event"]
        kind = pick(inner, "type")
        return {
            "event": kind,
            "action": pick(inner, "subtype"),
            "team": pick(payload, "team_id", "team"),
            # Where it happened: not a channel the event describes (channel_created's object).
            "channel": pick(inner, "channel", "item.channel", "channel_id"),
            "sender": pick(inner, "user", "user.id", "bot_id") or "unknown",
            "title": pick(inner, "reaction") or kind,
            "body": clip(pick(inner, "text")),
            "ref": pick(inner, "thread_ts", "ts"),
            "payload": payload,
        }

    def reply(self, fields: dict[str, Any], routed: dict[str, Any] | None) -> WebhookReply | None:
        """Echo a ``url_verification`` challenge, as Slack's documentation shows it."""
        challenge = pick(fields.get("payload"), "challenge")
        if fields.get("event") == "url_verification" and isinstance(challenge, str):
            return WebhookReply.json({"challenge": challenge})
        return None

    def renew(self, body: bytes, delivery: str) -> bytes:
        """A recorded event as a new one: ``event_id`` set to ``delivery``."""
        payload = json_object(body)
        if payload is None or payload.get("type") != "event_callback":
            return body
        return json.dumps({**payload, "event_id": delivery}).encode()

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """What Slack sends: a timestamp of now and, signed over it, ``X-Slack-Signature``
        (the event and its id travel in the body)."""
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: str(int(clock()))}
        return self.signed(headers, body, secret)

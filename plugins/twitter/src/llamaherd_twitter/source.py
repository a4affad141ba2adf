"""The ``twitter`` webhook source: X's Account Activity webhooks.

X proves a webhook URL with a Challenge-Response Check: ``GET ?crc_token=<t>`` must be answered
``{"response_token": "sha256=<base64 HMAC-SHA256(consumer secret, t)>"}``, at registration and
periodically after. Each event POST carries the same HMAC of its raw body in
``X-Twitter-Webhooks-Signature``. The body holds ``for_user_id`` (the subscribed user) and one
array of events named by its key (``tweet_create_events``, ``direct_message_events``, ...): that
key is the event name, as in Action Llama.
"""

from __future__ import annotations

from typing import Any

from llamaherd.api import (
    HmacSource,
    WebhookFilter,
    WebhookReply,
    body_digest,
    clip,
    hmac_digest,
    pick,
)

# Keys of the body that describe it rather than hold events.
METADATA = {"for_user_id", "user_has_blocked"}
# Longest crc_token answered. X's tokens are short; a CRC must never sign a whole event body
# (it is the same HMAC as a POST's signature), so a token with a brace is refused too.
MAX_CRC_TOKEN = 512
USERS = "Subscribed user IDs (the body's for_user_id)."


def _tweet_url(tweet: Any) -> str | None:
    name, tweet_id = pick(tweet, "user.screen_name"), pick(tweet, "id_str")
    return f"https://twitter.com/{name}/status/{tweet_id}" if name and tweet_id else None


def _title(key: str, item: dict[str, Any]) -> str | None:
    """What happened, in a line, for the event kinds that carry no text of their own."""
    source, target = pick(item, "source.screen_name"), pick(item, "target.screen_name")
    verb = key.removesuffix("_events")
    if source or target:
        return f"@{source or '?'} {verb} @{target or '?'}"
    if key == "tweet_delete_events":
        return f"Deleted tweet {pick(item, 'status.id') or '?'}"
    if key == "favorite_events":
        return f"Liked tweet by @{pick(item, 'favorited_status.user.screen_name') or '?'}"
    return None


class TwitterSource(HmacSource):
    """WebhookSource ``twitter``."""

    name = "twitter"
    description = (
        "X (Twitter) Account Activity webhooks (CRC on GET, X-Twitter-Webhooks-Signature)."
    )
    credential_type = "x_twitter_api"
    secret_field = "consumer_secret"
    schema: dict[str, Any] = {}
    signature_header = "X-Twitter-Webhooks-Signature"
    signature_prefix = "sha256="
    signature_encoding = "base64"
    filters = {
        "users": WebhookFilter("user", USERS),
        "repos": WebhookFilter("user", f"{USERS} Action Llama's spelling of `users`."),
    }

    def answer_get(self, query: dict[str, str], secrets: list[str]) -> WebhookReply | None:
        """The CRC answer for ``crc_token``, with the first secret; None for no token or one
        that is not a CRC token."""
        token = query.get("crc_token", "")
        if not token or len(token) > MAX_CRC_TOKEN or "{" in token or "}" in token:
            return None
        digest = hmac_digest(secrets[0], token.encode(), encoding="base64")
        return WebhookReply.json({"response_token": f"sha256={digest}"})

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        payload = self.load_json(headers, body)
        if not any(isinstance(v, list) for k, v in payload.items() if k not in METADATA):
            raise ValueError("no array of events in the body (tweet_create_events, ...)")
        fields = self.normalise(None, payload)
        fields["delivery"] = body_digest(body)  # X sends no delivery id: the same body is one
        return fields

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        key = next(k for k, v in payload.items() if k not in METADATA and isinstance(v, list))
        items = payload[key]
        item = items[0] if items and isinstance(items[0], dict) else {}
        verb = key.removesuffix("_events").rpartition("_")[2]
        text = pick(item, "text", "message_create.message_data.text", "favorited_status.text")
        return {
            "event": key,
            "action": verb,
            "user": pick(payload, "for_user_id"),
            "sender": pick(
                item,
                "user.screen_name",
                "source.screen_name",
                "message_create.sender_id",
                "sender_id",
                "user_id",
            ),
            "title": clip(text, 200) or _title(key, item),
            "url": _tweet_url(item) or _tweet_url(item.get("favorited_status")),
            "body": clip(text),
            "payload": payload,
        }

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """The signature header (the events and their kind travel in the body)."""
        return self.signed({"Content-Type": "application/json"}, body, secret)

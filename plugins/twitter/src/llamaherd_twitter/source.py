"""The ``twitter`` webhook source: X's Account Activity webhooks.

X proves a webhook URL with a Challenge-Response Check: ``GET ?crc_token=<t>`` must be answered
``{"response_token": "sha256=<base64 HMAC-SHA256(consumer secret, t)>"}``, at registration and
periodically after. Each event POST carries the same HMAC of its raw body in
``X-Twitter-Webhooks-Signature``. The body holds ``for_user_id`` (the subscribed user) and one
array of events named by its key (``tweet_create_events``, ``direct_message_events``, ...): that
key is the event name, as in Action Llama.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _or_unknown(item: Any, *paths: str) -> str:
    found = pick(item, *paths)
    return "unknown" if found is None else str(found)


def _tweet(item: dict[str, Any]) -> dict[str, Any]:
    text = pick(item, "text")
    return {
        "sender": _or_unknown(item, "user.screen_name", "user.id_str"),
        "title": clip(text),
        "body": clip(text),
        "url": _tweet_url(item),
    }


def _deleted(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "sender": _or_unknown(item, "user_id"),
        "title": f"Deleted tweet {_or_unknown(item, 'status.id')}",
    }


def _liked(item: dict[str, Any]) -> dict[str, Any]:
    liked = item.get("favorited_status")
    return {
        "sender": _or_unknown(item, "user.screen_name", "user.id_str"),
        "title": f"Liked tweet by @{_or_unknown(liked, 'user.screen_name')}",
        "body": clip(pick(liked, "text")),
        "url": _tweet_url(liked),
    }


def _between(verb: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Follow, block, mute and their undoing: "@source <verb> @target"."""

    def context(item: dict[str, Any]) -> dict[str, Any]:
        source, target = (_or_unknown(item, f"{who}.screen_name") for who in ("source", "target"))
        return {
            "sender": _or_unknown(item, "source.screen_name", "source.id"),
            "title": f"@{source} {verb} @{target}",
        }

    return context


def _message(item: dict[str, Any]) -> dict[str, Any]:
    sender = _or_unknown(item, "message_create.sender_id")
    return {
        "sender": sender,
        "title": f"Direct message from {sender}",
        "body": clip(pick(item, "message_create.message_data.text")),
    }


def _from_sender(wording: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Typing indicators and read receipts: "<wording> <sender id>"."""

    def context(item: dict[str, Any]) -> dict[str, Any]:
        sender = _or_unknown(item, "sender_id")
        return {"sender": sender, "title": f"{wording} {sender}"}

    return context


# Sender, title, body and link per event array, in Action Llama's words
# (dist/webhooks/providers/twitter.js); another array's title is its name.
CONTEXTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "tweet_create_events": _tweet,
    "tweet_delete_events": _deleted,
    "favorite_events": _liked,
    "follow_events": _between("followed"),
    "unfollow_events": _between("unfollowed"),
    "block_events": _between("blocked"),
    "unblock_events": _between("unblocked"),
    "mute_events": _between("muted"),
    "unmute_events": _between("unmuted"),
    "direct_message_events": _message,
    "direct_message_indicate_typing_events": _from_sender("Typing indicator from"),
    "direct_message_mark_read_events": _from_sender("Message read by"),
}


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
        delivery = body_digest(body)  # X sends no delivery id: the same body is one
        if not any(isinstance(v, list) for k, v in payload.items() if k not in METADATA):
            # As Action Llama: acknowledged, routed nowhere.
            return {
                "event": None,
                "lacks": "array of events",
                "delivery": delivery,
                "payload": payload,
            }
        fields = self.normalise(None, payload)
        fields["delivery"] = delivery
        return fields

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        key = next(k for k, v in payload.items() if k not in METADATA and isinstance(v, list))
        items = payload[key]
        item = items[0] if items and isinstance(items[0], dict) else None
        fields: dict[str, Any] = {
            "event": key,
            "action": key.removesuffix("_events").rpartition("_")[2],
            "user": pick(payload, "for_user_id"),
            "sender": "unknown",
            "payload": payload,
        }
        if item is not None:  # an empty array says only which kind of event it was
            fields.update(CONTEXTS[key](item) if key in CONTEXTS else {"title": key})
        return fields

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """The signature header (the events and their kind travel in the body)."""
        return self.signed({"Content-Type": "application/json"}, body, secret)

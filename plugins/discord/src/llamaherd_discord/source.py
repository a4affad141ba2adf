"""The ``discord`` webhook source: a Discord application's Interactions Endpoint.

Discord signs ``<X-Signature-Timestamp><raw body>`` with the application's Ed25519 key
(``X-Signature-Ed25519``, hex); the receiver holds only the public key (``discord_bot``'s
``public_key``) and must refuse a bad signature with 401 (Discord tests that). A ``PING`` is
answered ``{"type":1}``; every other interaction must be answered within three seconds, so once
its run is queued the answer is a deferred response (the run then edits it), and an interaction
no agent takes gets a short ephemeral message instead of a spinner that never ends.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from llamaherd.api import (
    WebhookFilter,
    WebhookReply,
    body_digest,
    clip,
    clock,
    fresh,
    json_object,
    pick,
)

if TYPE_CHECKING:  # cryptography loads with the first signature checked (a scheduler's start
    # imports every webhook source type)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SIGNATURE_HEADER = "X-Signature-Ed25519"
TIMESTAMP_HEADER = "X-Signature-Timestamp"
TOLERANCE = 300.0  # seconds a signed timestamp may be off: a captured request is not replayable
PING = 1
# Interaction types (Discord's numbers) and Action Llama's event names for them.
EVENTS = {
    2: "application_command",
    3: "message_component",
    4: "autocomplete",
    5: "modal_submit",
}
# Interaction responses (Discord's numbers).
PONG = 1
MESSAGE = 4  # CHANNEL_MESSAGE_WITH_SOURCE
DEFERRED_MESSAGE = 5  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: "thinking..." until the run edits it
DEFERRED_UPDATE = 6  # DEFERRED_UPDATE_MESSAGE: a component click acknowledged
AUTOCOMPLETE_RESULT = 8
EPHEMERAL = 64  # message flag: only the user who interacted sees it


def _key(hex_key: str) -> Ed25519PublicKey | None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key.strip()))
    except ValueError:
        return None


def _js(value: Any) -> str:
    """A value as Action Llama writes it into text (JavaScript's ``String(value)``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "null" if value is None else str(value)


def _options(data: dict[str, Any]) -> str | None:
    """A command's options as ``name: value, ...`` (subcommands flattened)."""
    found: list[str] = []
    pending = list(data.get("options") or [])
    while pending:
        option = pending.pop(0)
        if not isinstance(option, dict):
            continue
        if "value" in option:
            found.append(f"{option.get('name')}: {_js(option['value'])}")
        pending += [o for o in option.get("options") or [] if isinstance(o, dict)]
    return clip(", ".join(found)) if found else None


class DiscordSource:
    """WebhookSource ``discord``."""

    name = "discord"
    description = "Discord interactions (X-Signature-Ed25519; PING and deferred responses)."
    credential_type = "discord_bot"
    secret_field = "public_key"
    signs_with_private_key = True
    schema: dict[str, Any] = {}
    filters = {
        "guilds": WebhookFilter("guild", "Discord server (guild) IDs."),
        "channels": WebhookFilter(
            "channel",
            "Channel IDs (an interaction without a channel passes).",
            skip_when_absent=True,
        ),
        "commands": WebhookFilter(
            "command",
            "Slash command names (buttons and modals, which have none, pass).",
            skip_when_absent=True,
        ),
    }

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """An Ed25519 signature of timestamp + body under one of the public keys ``secrets``,
        made within the last five minutes."""
        stamp = headers.get(TIMESTAMP_HEADER.lower(), "")
        try:
            signature = bytes.fromhex(headers.get(SIGNATURE_HEADER.lower(), ""))
        except ValueError:
            return False
        if len(signature) != 64 or not fresh(stamp, clock(), TOLERANCE):
            return False
        from cryptography.exceptions import InvalidSignature

        message = stamp.encode() + body
        ok = False
        for key in filter(None, map(_key, secrets)):  # every key, whichever one matches
            try:
                key.verify(signature, message)
                ok = True
            except InvalidSignature:
                pass
        return ok

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """An interaction's fields; a PING comes back as ``ignore`` (answered, never queued),
        a type Discord does not define with ``lacks``."""
        payload = json_object(body)
        if payload is None:
            raise ValueError("body is not a JSON object")
        kind = payload.get("type")
        unrouted = {"delivery": body_digest(body), "payload": payload}
        if isinstance(kind, bool) or (kind != PING and kind not in EVENTS):
            # As Action Llama: acknowledged, routed nowhere.
            return {**unrouted, "event": None, "lacks": f"interaction type (type {kind!r})"}
        if kind == PING:
            return {**unrouted, "event": "ping", "ignore": True}
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        command = pick(data, "name") if kind in (2, 4) else None
        # Action and title as Action Llama names them: the command; a component's type and
        # custom id; a modal's custom id.
        if kind == 3:
            action = _js(data.get("component_type") or "unknown")
            title = pick(data, "custom_id") or "component"
        elif kind == 5:
            action = title = pick(data, "custom_id") or "modal"
        else:
            action = title = command or "unknown"
        return {
            "event": EVENTS[kind],
            "action": action,
            "guild": pick(payload, "guild_id"),
            "channel": pick(payload, "channel_id", "channel.id"),
            "command": command,
            "sender": pick(payload, "member.user.username", "user.username") or "unknown",
            "title": title,
            "body": _options(data),
            "delivery": pick(payload, "id") or body_digest(body),
            "payload": payload,
        }

    def reply(self, fields: dict[str, Any], routed: dict[str, Any] | None) -> WebhookReply | None:
        """PONG a PING; defer an interaction a run takes (or a waiting run resumes on), tell the
        user when none does."""
        if routed is None:
            return WebhookReply.json({"type": PONG}) if fields.get("event") == "ping" else None
        if fields["event"] == "autocomplete":  # cannot be deferred: offer no choices
            return WebhookReply.json({"type": AUTOCOMPLETE_RESULT, "data": {"choices": []}})
        if routed.get("queued") or routed.get("resumed") or routed.get("duplicate"):
            deferred = (
                DEFERRED_UPDATE if fields["event"] == "message_component" else DEFERRED_MESSAGE
            )
            return WebhookReply.json({"type": deferred})
        what = f"/{fields['command']}" if fields.get("command") else "This interaction"
        content = f"{what} is not handled by any agent right now."
        return WebhookReply.json(
            {"type": MESSAGE, "data": {"content": content, "flags": EPHEMERAL}}
        )

    def renew(self, body: bytes, delivery: str) -> bytes:
        """A recorded interaction as a new one: its ``id`` set to ``delivery``."""
        payload = json_object(body)
        if payload is None or payload.get("type") in (None, PING):
            return body
        return json.dumps({**payload, "id": delivery}).encode()

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """What Discord sends, signed with ``secret``: the hex private key (seed) of a test key
        pair whose public key the source's credential holds (None: unsigned)."""
        stamp = str(int(clock()))
        headers = {"Content-Type": "application/json", TIMESTAMP_HEADER: stamp}
        if secret is not None:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

            key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret.strip()))
            headers[SIGNATURE_HEADER] = key.sign(stamp.encode() + body).hex()
        return headers

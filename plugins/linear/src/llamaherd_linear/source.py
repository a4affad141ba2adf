"""The ``linear`` webhook source: Linear's data-change webhooks.

Linear signs the raw body with the webhook's secret (HMAC-SHA256, hex, in ``Linear-Signature``),
names the delivery in ``Linear-Delivery`` and the entity type in ``Linear-Event``; the body
carries ``webhookTimestamp`` (epoch milliseconds), which Linear asks receivers to check is
within a minute, so a captured delivery cannot be replayed later. Event names are Action
Llama's: ``Issue`` is ``issues``, ``Comment`` is ``issue_comment``, others lower-cased.
"""

from __future__ import annotations

import json
from typing import Any

from llamaherd.api import (
    HmacSource,
    WebhookFilter,
    absent,
    clip,
    clock,
    first_absent,
    fresh,
    json_object,
    pick,
)

TOLERANCE = 60.0  # seconds, as Linear's documentation recommends
EVENTS = {"Issue": "issues", "Comment": "issue_comment"}


def _people(person: Any) -> list[str]:
    """Every way a filter may name a person: email, name, id."""
    if not isinstance(person, dict):
        return []
    return [str(person[k]) for k in ("email", "name", "id") if isinstance(person.get(k), str)]


def _labels(item: Any) -> list[str]:
    labels = item.get("labels") if isinstance(item, dict) else None
    if not isinstance(labels, list):
        return []
    return [str(label["name"]) for label in labels if isinstance(label, dict) and "name" in label]


class LinearSource(HmacSource):
    """WebhookSource ``linear``."""

    name = "linear"
    description = "Linear webhooks (Linear-Signature, webhookTimestamp within a minute)."
    credential_type = "linear_webhook_secret"
    # Every body holds ids and times of its own event, and only the body is signed: the same
    # body under a new delivery id is a replay (dropped as a duplicate).
    dedupe_bodies = True
    schema: dict[str, Any] = {}
    signature_header = "Linear-Signature"
    signature_prefix = ""
    delivery_header = "Linear-Delivery"
    event_header = "Linear-Event"
    event_field = "type"
    filters = {
        "organizations": WebhookFilter("org", "Linear organization IDs."),
        "actions": WebhookFilter("action", "Actions: create, update, remove."),
        "labels": WebhookFilter("labels", "Any of these label names is on the issue."),
        "assignee": WebhookFilter("assignees", "Assigned to (email, name or id).", fold=True),
        "author": WebhookFilter("authors", "Created by (email, name or id).", fold=True),
        "teams": WebhookFilter("team", "Team keys (ENG) or names.", fold=True),
    }

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """The signature, then (only once it holds, so nothing unsigned is parsed) the signed
        ``webhookTimestamp``: within a minute of now."""
        if not super().verify(headers, body, secrets):
            return False
        stamp = (json_object(body) or {}).get("webhookTimestamp")
        return fresh(stamp, clock(), TOLERANCE)

    def renew(self, body: bytes, delivery: str) -> bytes:
        """The body with ``webhookTimestamp`` set to now (a test delivery of a recorded one;
        the delivery id travels in a header)."""
        payload = json_object(body)
        if payload is None:
            return body
        return json.dumps({**payload, "webhookTimestamp": int(clock() * 1000)}).encode()

    def lacks(self, event: str | None, payload: dict[str, Any]) -> str | None:
        """What Action Llama's provider drops a delivery for: no ``action`` or ``type``, no
        organization (``organizationId``, or the team's in ``data``), no ``data``, or a
        comment without its issue."""
        missing = first_absent(payload, "action", "type")
        if missing:
            return missing
        if absent(payload, "organizationId") and absent(payload, "data.team.organization.id"):
            return "organizationId"
        if absent(payload, "data"):
            return "data"
        if payload.get("type") == "Comment" and absent(payload, "data.issue"):
            return "data.issue"
        return None

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        kind = event or pick(payload, "type")
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        issue = data.get("issue") if isinstance(data.get("issue"), dict) else data
        team = issue.get("team") if isinstance(issue.get("team"), dict) else {}
        assignee, creator = issue.get("assignee"), issue.get("creator")
        title = clip(pick(issue, "title"))
        if kind not in EVENTS:  # as Action Llama: another entity's title, action, or type
            title = title or pick(payload, "action") or kind
        return {
            "event": EVENTS.get(kind, kind.lower()) if isinstance(kind, str) else None,
            "action": pick(payload, "action"),
            "org": pick(payload, "organizationId", "data.team.organization.id"),
            "team": pick(team, "key", "name"),
            "number": pick(issue, "number"),
            "title": title,
            "url": pick(payload, "url") or pick(data, "url"),
            # Linear sends `actor`; Action Llama reads `createdBy` / `updatedBy`.
            "sender": pick(
                payload, "actor.email", "actor.name", "createdBy.email", "updatedBy.email"
            )
            or "unknown",
            "author": pick(creator, "email", "name") if isinstance(creator, dict) else None,
            "authors": _people(creator),
            "assignee": pick(assignee, "email", "name") if isinstance(assignee, dict) else None,
            "assignees": _people(assignee),
            "labels": _labels(issue),
            "comment": clip(pick(data, "body")) if issue is not data else None,
            "body": clip(pick(issue, "description")),
            "payload": payload,
        }

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """Linear's headers; ``Linear-Event`` is the entity type (``Issue``) of the body."""
        kind = pick(json_object(body), "type")
        return super().request_headers(body, kind or event, delivery, secret)

"""The ``sentry`` webhook source: Sentry integration-platform webhooks.

Sentry signs the raw body with the integration's client secret (HMAC-SHA256, hex, in
``Sentry-Hook-Signature``), names the resource in ``Sentry-Hook-Resource`` (``issue``,
``event_alert``, ``metric_alert``, ``error``, ``comment``, ``installation``) and the request in
``Request-ID``; the payload is ``{"action", "actor", "data": {<resource>: ...}, "installation"}``.
"""

from __future__ import annotations

from typing import Any

from llamaherd.api import HmacSource, WebhookFilter, clip, pick


class SentrySource(HmacSource):
    """WebhookSource ``sentry``."""

    name = "sentry"
    description = "Sentry integration webhooks (Sentry-Hook-Signature)."
    credential_type = "sentry_client_secret"
    # Every body holds ids and times of its own event, and only the body is signed: the same
    # body under a new delivery id is a replay (dropped as a duplicate).
    dedupe_bodies = True
    schema: dict[str, Any] = {}
    signature_header = "Sentry-Hook-Signature"
    signature_prefix = ""
    delivery_header = "Request-ID"
    event_header = "Sentry-Hook-Resource"
    filters = {
        "resources": WebhookFilter(
            "event", "Sentry resources: issue, event_alert, metric_alert, error, comment."
        ),
        "actions": WebhookFilter("action", "Actions (created, resolved, triggered, ...)."),
        "projects": WebhookFilter("project", "Project slugs; globs allowed.", glob=True),
    }

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """Normalised fields; without a Sentry-Hook-Resource header, ``lacks`` it (as Action
        Llama drops such a delivery)."""
        fields = super().parse(headers, body)
        if not headers.get(self.event_header.lower()):
            fields["lacks"] = f"{self.event_header} header"
        return fields

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """The resource's title, link and project, wherever this resource keeps them."""
        data = payload.get("data") if isinstance(payload.get("data"), dict) else {}
        item = next((data[k] for k in ITEM_KEYS if isinstance(data.get(k), dict)), {})
        comment = data.get("comment")
        action = pick(payload, "action")
        title = clip(pick(item, "title") or pick(data, "description_title"))
        if event not in RESOURCES:  # as Action Llama: the action, else the resource
            title = title or action or event
        return {
            "event": event,
            "action": action,
            "sender": pick(payload, "actor.name", "actor.type") or "unknown",
            "project": pick(item, "project.slug", "project_slug")
            or pick(data, "project_slug", "issue.project.slug"),
            "org": pick(data, "installation.organization.slug", "metric_alert.organization.slug"),
            "title": title,
            "url": pick(item, "web_url", "url") or pick(data, "web_url"),
            "number": pick(item, "shortId"),
            "assignee": pick(item, "assignedTo.name", "assignedTo.email"),
            "comment": clip(comment if isinstance(comment, str) else pick(data, "comment.text")),
            "body": clip(pick(item, "message", "culprit") or pick(data, "description_text")),
            "payload": payload,
        }


# The resources Action Llama knows; another one's title is its action (else its name).
RESOURCES = ("event_alert", "metric_alert", "issue", "error", "comment")
# Where each resource keeps its object under ``data``, most specific first.
ITEM_KEYS = ("issue", "event", "error", "metric_alert", "installation")

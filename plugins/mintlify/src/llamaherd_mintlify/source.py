"""The ``mintlify`` webhook source: Mintlify's deployment (build) notifications.

Mintlify's public documentation does not describe how it signs webhooks; this follows Action
Llama's source, which users' Mintlify setups already work with: an HMAC-SHA256 of the raw body
with the shared secret, hex, in ``X-Mintlify-Signature`` (or ``Mintlify-Signature``; a
``sha256=`` prefix is accepted too, and ``signatureHeader`` names another header). The body
names the ``event`` (default ``build``), its ``action`` or ``status``, the ``project`` and the
``branch``.
"""

from __future__ import annotations

from typing import Any

from llamaherd.api import HmacSource, WebhookFilter, absent, body_digest, clip, pick

ALTERNATE_HEADER = "mintlify-signature"
CONCLUSIONS = {
    "failed": "failure",
    "failure": "failure",
    "succeeded": "success",
    "success": "success",
}
PROJECTS = "Mintlify project names (or organization, when the body names no project)."


class MintlifySource(HmacSource):
    """WebhookSource ``mintlify``."""

    name = "mintlify"
    description = "Mintlify webhooks (HMAC-SHA256 of the body in X-Mintlify-Signature)."
    credential_type = "mintlify_webhook_secret"
    schema: dict[str, Any] = {
        "signatureHeader": {"type": "string", "default": "X-Mintlify-Signature"},
    }
    signature_header = "X-Mintlify-Signature"
    signature_prefix = ""
    filters = {
        "projects": WebhookFilter("project", PROJECTS),
        "repos": WebhookFilter("project", f"{PROJECTS} Action Llama's spelling of `projects`."),
        "actions": WebhookFilter("action", "Actions or statuses (started, succeeded, failed)."),
        "branches": WebhookFilter(
            "branch", 'Git branches; globs allowed (a delivery without one is "main").', True
        ),
    }

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool:
        """The configured header or ``Mintlify-Signature``, bare hex or ``sha256=``-prefixed."""
        name = self.signature_header.lower()
        given = headers.get(name) or headers.get(ALTERNATE_HEADER, "")
        return super().verify(
            {**headers, name: given.strip().removeprefix("sha256=")}, body, secrets
        )

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        payload = self.load_json(headers, body)
        fields = self.normalise(pick(payload, "event") or "build", payload)
        # Several notifications of one deployment share its id: only the same body is the same.
        fields["delivery"] = body_digest(body)
        if absent(payload, "action") and absent(payload, "status"):  # Action Llama drops it
            fields["lacks"] = "action"
        return fields

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        action = pick(payload, "action", "status")
        error = pick(payload, "error")
        return {
            "event": event,
            "action": action,
            "project": pick(payload, "project", "project.name", "organization"),
            # As Action Llama: a build names no branch when it is the default one.
            "branch": pick(payload, "branch", "git.branch") or "main",
            "sender": pick(payload, "user.email", "user.name") or "mintlify",
            "title": clip(pick(payload, "title")) or (f"Build {action}" if action else None),
            "url": pick(payload, "url", "build_url", "logs_url"),
            "conclusion": CONCLUSIONS.get(action) if isinstance(action, str) else None,
            "body": clip(
                f"Build failed: {error}" if error else pick(payload, "message", "description")
            ),
            "payload": payload,
        }

    def request_headers(
        self, body: bytes, event: str | None, delivery: str, secret: str | None
    ) -> dict[str, str]:
        """The signature header (the event and id travel in the body)."""
        return self.signed({"Content-Type": "application/json"}, body, secret)

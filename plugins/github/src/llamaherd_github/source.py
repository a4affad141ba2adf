"""The ``github`` webhook source: X-Hub-Signature-256, X-GitHub-Event, X-GitHub-Delivery.

Signature checking is core's HMAC-SHA256 one (``llamaherd.api.HmacSource``); this module adds
GitHub's header names, form-encoded bodies, ``ping`` and the normalised fields that
``[[webhooks]]`` filters match on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from llamaherd.api import HmacSource, WebhookFilter


def _login(obj: Any) -> str | None:
    return obj.get("login") if isinstance(obj, dict) else None


def _names(items: Any, key: str) -> list[str]:
    if not isinstance(items, list):
        return []
    return [
        item[key] for item in items if isinstance(item, dict) and isinstance(item.get(key), str)
    ]


def _branch(ref: Any) -> str | None:
    if not isinstance(ref, str):
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


class GitHubSource(HmacSource):
    """WebhookSource ``github``."""

    name = "github"
    description = "GitHub repository and organisation webhooks (X-Hub-Signature-256)."
    credential_type = "github_webhook_secret"
    # Every body holds ids and times of its own event, and only the body is signed: the same
    # body under a new delivery id is a replay (dropped as a duplicate).
    dedupe_bodies = True
    schema: dict[str, Any] = {}
    filters = {
        **HmacSource.filters,
        "org": WebhookFilter("org", "Organisation (one; `orgs` takes several).", fold=True),
    }
    signature_header = "X-Hub-Signature-256"
    delivery_header = "X-GitHub-Delivery"
    event_header = "X-GitHub-Event"

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """Normalised fields; ``ping`` comes back as ``ignore`` (answered 200, never queued)."""
        if not headers.get(self.event_header.lower()):
            raise ValueError("missing X-GitHub-Event header")
        fields = super().parse(headers, body)
        if fields["event"] == "ping":
            fields.update(ignore=True, status=200)
        return fields

    def load_json(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """JSON body, or GitHub's form-encoded variant (``payload=<json>``)."""
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = parse_qs(body.decode("utf-8", "replace"))
            body = (form.get("payload") or [""])[0].encode()
        return super().load_json(headers, body)

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """Fields for filters and the trigger block, from whichever objects the event carries."""
        repo = payload.get("repository") if isinstance(payload.get("repository"), dict) else {}
        item = next(
            (payload[k] for k in ("pull_request", "issue") if isinstance(payload.get(k), dict)), {}
        )
        run = next(
            (
                payload[k]
                for k in ("check_run", "check_suite", "workflow_run")
                if isinstance(payload.get(k), dict)
            ),
            {},
        )
        base = item.get("base") if isinstance(item.get("base"), dict) else {}
        head = item.get("head") if isinstance(item.get("head"), dict) else {}
        suite = run.get("check_suite") if isinstance(run.get("check_suite"), dict) else {}
        label = payload.get("label") if isinstance(payload.get("label"), dict) else None
        assignee = _login(payload.get("assignee"))
        number = item.get("number", payload.get("number"))
        return {
            "event": event,
            "action": payload.get("action") if isinstance(payload.get("action"), str) else None,
            "repo": repo.get("full_name"),
            "org": _login(payload.get("organization")) or _login(repo.get("owner")),
            "sender": _login(payload.get("sender")),
            "title": item.get("title"),
            "url": item.get("html_url"),
            "number": number if isinstance(number, int) and not isinstance(number, bool) else None,
            "ref": payload.get("ref") or base.get("ref") or run.get("head_branch"),
            "branch": _branch(payload.get("ref"))
            or base.get("ref")
            or run.get("head_branch")
            or suite.get("head_branch"),
            "head_ref": head.get("ref"),
            "labels": sorted(set(_names(item.get("labels"), "name") + _names([label], "name"))),
            "assignees": sorted(
                set(_names(item.get("assignees"), "login") + ([assignee] if assignee else []))
            ),
            "author": _login(item.get("user")) or _login(payload.get("sender")),
            "conclusion": run.get("conclusion"),
            "payload": payload,
        }

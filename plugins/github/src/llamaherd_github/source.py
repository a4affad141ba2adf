"""The ``github`` webhook source: X-Hub-Signature-256, X-GitHub-Event, X-GitHub-Delivery.

Signature checking is core's HMAC-SHA256 one (``llamaherd.api.HmacSource``); this module adds
GitHub's header names, form-encoded bodies, ``ping`` and the normalised fields that
``[[webhooks]]`` filters match on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from llamaherd.api import HmacSource, WebhookFilter, absent, clip, first_absent


def _login(obj: Any) -> str | None:
    return obj.get("login") if isinstance(obj, dict) else None


def _names(items: Any, key: str) -> list[str]:
    if not isinstance(items, list):
        return []
    return [
        item[key] for item in items if isinstance(item, dict) and isinstance(item.get(key), str)
    ]


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
        """Normalised fields; ``ping`` comes back as ``ignore`` (answered 200, never queued),
        a delivery without an X-GitHub-Event header or its event's objects with ``lacks``."""
        fields = super().parse(headers, body)
        if not headers.get(self.event_header.lower()):
            fields["lacks"] = f"{self.event_header} header"
        elif fields["event"] == "ping":
            fields.update(ignore=True, status=200)
        return fields

    def lacks(self, event: str | None, payload: dict[str, Any]) -> str | None:
        """What Action Llama's provider drops a delivery for: no ``repository.full_name``
        (``repository``), or an event without its objects (an ``issues`` event without
        ``issue``, ``NEEDS``)."""
        if absent(payload, "repository.full_name"):
            return "repository"
        return first_absent(payload, *NEEDS.get(event or "", ()))

    def load_json(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """JSON body, or GitHub's form-encoded variant (``payload=<json>``)."""
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = parse_qs(body.decode("utf-8", "replace"))
            body = (form.get("payload") or [""])[0].encode()
        return super().load_json(headers, body)

    def normalise(self, event: str | None, payload: dict[str, Any]) -> dict[str, Any]:
        """The fields Action Llama's trigger context has for the event (``CONTEXTS``), and
        ours that filters and waits use (``org``, ``ref``, ``assignees``, ``base_ref``)."""
        repo = _object(payload, "repository")
        full_name = repo.get("full_name") if isinstance(repo.get("full_name"), str) else None
        item = _object(payload, "pull_request") or _object(payload, "issue")
        assigned = [_login(payload.get("assignee")), _login(item.get("assignee"))]
        number = item.get("number", payload.get("number"))
        fields = {
            "event": event,
            "action": payload.get("action") if isinstance(payload.get("action"), str) else None,
            "repo": full_name,
            "org": _login(payload.get("organization"))
            or _login(repo.get("owner"))
            or (full_name.split("/")[0] if full_name and "/" in full_name else None),
            "sender": _login(payload.get("sender")) or "unknown",
            "number": _int(number),
            "ref": payload.get("ref") if isinstance(payload.get("ref"), str) else None,
            "base_ref": _str(_object(item, "base").get("ref")),
            # Check runs and suites carry their branch (Action Llama gives them none).
            "branch": _str(_object(payload, "check_run").get("head_branch"))
            or _str(_object(_object(payload, "check_run"), "check_suite").get("head_branch"))
            or _str(_object(payload, "check_suite").get("head_branch")),
            "labels": sorted(
                set(_names(item.get("labels"), "name") + _names([payload.get("label")], "name"))
            ),
            "assignees": sorted(
                set(_names(item.get("assignees"), "login") + [a for a in assigned if a])
            ),
            "conclusion": _conclusion(payload),
            "payload": payload,
        }
        if event in CONTEXTS:
            context = CONTEXTS[event](payload)
        else:  # any other event: its action, else its name, as the title
            context = {"title": fields["action"] or event}
        return {**fields, **context}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _object(data: Any, key: str) -> dict[str, Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


def _labels(item: dict[str, Any]) -> list[str]:
    return _names(item.get("labels"), "name")


def _conclusion(payload: dict[str, Any]) -> str | None:
    """A check or workflow run's conclusion (check runs and suites too: Action Llama gives none
    for them, so its ``conclusions`` filter lets every one through)."""
    for key in ("workflow_run", "check_run", "check_suite"):
        conclusion = _object(payload, key).get("conclusion")
        if isinstance(conclusion, str):
            return conclusion
    return None


# What Action Llama's GitHub provider puts in the trigger context, per event
# (dist/webhooks/providers/github.js). A delivery without the objects its event needs
# (``NEEDS``) goes to no agent.
def _item(key: str) -> Any:
    """The context of an ``issues`` or ``pull_request`` event, from its object ``key``; a pull
    request's branch is its head branch."""

    def context(payload: dict[str, Any]) -> dict[str, Any]:
        item = _object(payload, key)
        found = {
            "number": _int(item.get("number")),
            "title": _str(item.get("title")),
            "body": clip(item.get("body")),
            "url": _str(item.get("html_url")),
            "author": _login(item.get("user")),
            "assignee": _login(item.get("assignee")),
            "labels": _labels(item),
        }
        if key == "pull_request":
            found["branch"] = _str(_object(item, "head").get("ref"))
        return found

    return context


def _issue_comment(payload: dict[str, Any]) -> dict[str, Any]:
    issue, comment = _object(payload, "issue"), _object(payload, "comment")
    return {
        "number": _int(issue.get("number")),
        "title": _str(issue.get("title")),
        "url": _str(comment.get("html_url")),
        "author": _login(issue.get("user")),
        "comment": clip(comment.get("body")),
        "labels": _labels(issue),
    }


def _review(payload: dict[str, Any]) -> dict[str, Any]:
    pr, review = _object(payload, "pull_request"), _object(payload, "review")
    return {
        "number": _int(pr.get("number")),
        "title": _str(pr.get("title")),
        "url": _str(review.get("html_url")),
        "author": _login(pr.get("user")),
        "comment": clip(review.get("body")),
        "branch": _str(_object(pr, "head").get("ref")),
    }


def _push(payload: dict[str, Any]) -> dict[str, Any]:
    ref = payload.get("ref") if isinstance(payload.get("ref"), str) else ""
    commit = _object(payload, "head_commit")
    return {
        # As Action Llama: a tag's ref stays whole, so a branches filter does not pass it.
        "branch": ref.replace("refs/heads/", "", 1) or None,
        "url": _str(payload.get("compare")),
        "title": _str(commit.get("message")),
        "author": _str(_object(commit, "author").get("username"))
        or _str(_object(payload, "pusher").get("name")),
    }


def _workflow_run(payload: dict[str, Any]) -> dict[str, Any]:
    run = _object(payload, "workflow_run")
    prs = run.get("pull_requests")
    first = prs[0] if isinstance(prs, list) and prs and isinstance(prs[0], dict) else {}
    return {
        "title": _str(run.get("name")),
        "url": _str(run.get("html_url")),
        "branch": _str(run.get("head_branch")),
        "author": _login(run.get("actor")),
        "conclusion": _str(run.get("conclusion")),
        "number": _int(first.get("number")),
    }


CONTEXTS = {
    "issues": _item("issue"),
    "pull_request": _item("pull_request"),
    "issue_comment": _issue_comment,
    "pull_request_review": _review,
    "push": _push,
    "workflow_run": _workflow_run,
}
# The objects each event's delivery must carry to be routed, as Action Llama's provider needs them.
NEEDS = {
    "issues": ("issue",),
    "pull_request": ("pull_request",),
    "issue_comment": ("issue", "comment"),
    "pull_request_review": ("pull_request", "review"),
    "workflow_run": ("workflow_run",),
}

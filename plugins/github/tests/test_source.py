"""GitHubSource: signature checks, ping, and the fields filters match on."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from llamaherd_github.source import GitHubSource

from llamaherd.api import unrouted

SECRET = "It's a Secret to Everybody"
# GitHub's documented example: https://docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries
DOC_BODY = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def headers(body: bytes, event: str = "pull_request", secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "x-hub-signature-256": f"sha256={digest}",
        "x-github-event": event,
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "content-type": "application/json",
    }


PR_OPENED = {
    "action": "opened",
    "number": 42,
    "pull_request": {
        "number": 42,
        "user": {"login": "alice"},
        "labels": [{"name": "bug"}, {"name": "triage"}],
        "assignees": [{"login": "bob"}],
        "base": {"ref": "main"},
        "head": {"ref": "fix-thing"},
    },
    "repository": {"full_name": "acme/widgets", "owner": {"login": "acme"}},
    "organization": {"login": "acme"},
    "sender": {"login": "alice"},
}


def test_verifies_githubs_documented_example():
    source = GitHubSource()
    assert source.verify({"x-hub-signature-256": DOC_SIGNATURE}, DOC_BODY, [SECRET])


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "sha256=",
        "sha256=00",
        DOC_SIGNATURE.replace("7", "8"),
        DOC_SIGNATURE[7:] + "0",
        "sha1=abc",
        "sha256=é",
        DOC_SIGNATURE.removeprefix("sha256="),  # the right MAC, bare: GitHub never sends it
    ],
)
def test_refuses_bad_or_missing_signatures(signature):
    source = GitHubSource()
    assert not source.verify({"x-hub-signature-256": signature}, DOC_BODY, [SECRET])


def test_refuses_when_no_secret_is_configured():
    assert not GitHubSource().verify({"x-hub-signature-256": DOC_SIGNATURE}, DOC_BODY, [])


def test_any_of_several_secrets_verifies_during_rotation():
    assert GitHubSource().verify({"x-hub-signature-256": DOC_SIGNATURE}, DOC_BODY, ["old", SECRET])


def test_request_headers_sign_like_github():
    body = json.dumps(PR_OPENED).encode()
    sent = GitHubSource().request_headers(body, "pull_request", "d-1", SECRET)
    lowered = {k.lower(): v for k, v in sent.items()}
    assert lowered["x-hub-signature-256"] == headers(body)["x-hub-signature-256"]
    assert lowered["x-github-event"] == "pull_request"
    assert lowered["x-github-delivery"] == "d-1"


def test_pull_request_fields():
    body = json.dumps(PR_OPENED).encode()
    fields = GitHubSource().parse(headers(body), body)
    assert fields["event"] == "pull_request"
    assert fields["delivery"] == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert fields["action"] == "opened"
    assert fields["repo"] == "acme/widgets"
    assert fields["org"] == "acme"
    assert fields["number"] == 42
    assert fields["branch"] == "fix-thing"  # the head branch, as in Action Llama
    assert fields["base_ref"] == "main"
    assert fields["labels"] == ["bug", "triage"]
    assert fields["assignees"] == ["bob"]
    assert fields["author"] == "alice"
    assert fields["payload"] == PR_OPENED
    assert not fields.get("ignore")


def test_push_branch_and_check_run_conclusion():
    push = {
        "ref": "refs/heads/release/1.2",
        "repository": {"full_name": "acme/widgets"},
        "sender": {"login": "carol"},
    }
    body = json.dumps(push).encode()
    fields = GitHubSource().parse(headers(body, "push"), body)
    assert (fields["branch"], fields["ref"], fields["sender"]) == (
        "release/1.2",
        "refs/heads/release/1.2",
        "carol",
    )

    check = {
        "action": "completed",
        "check_run": {"conclusion": "failure", "head_branch": "main"},
        "repository": {"full_name": "acme/widgets"},
    }
    body = json.dumps(check).encode()
    fields = GitHubSource().parse(headers(body, "check_run"), body)
    assert (fields["conclusion"], fields["branch"]) == ("failure", "main")


def test_tag_push_keeps_its_ref_as_branch():
    """As in Action Llama: a branches filter does not let a tag push through."""
    body = json.dumps({"ref": "refs/tags/v1.0"}).encode()
    assert GitHubSource().parse(headers(body, "push"), body)["branch"] == "refs/tags/v1.0"


def test_ping_is_answered_and_ignored():
    body = json.dumps({"zen": "Design for failure.", "hook_id": 1}).encode()
    fields = GitHubSource().parse(headers(body, "ping"), body)
    assert fields["ignore"] is True and fields["status"] == 200


def test_form_encoded_payload():
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps(PR_OPENED)}).encode()
    sent = headers(body) | {"content-type": "application/x-www-form-urlencoded"}
    assert GitHubSource().parse(sent, body)["number"] == 42


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b"\xff\xfe", b'"text"'])
def test_bad_bodies_are_value_errors(body):
    with pytest.raises(ValueError):
        GitHubSource().parse(headers(body), body)


def test_a_delivery_without_its_event_header_is_incomplete():
    """As Action Llama: acknowledged and routed nowhere (issue 42 item 2)."""
    body = json.dumps({"action": "opened", "repository": {"full_name": "acme/app"}}).encode()
    sent = headers(body)
    del sent["x-github-event"]
    fields = GitHubSource().parse(sent, body)
    assert unrouted(fields) == "incomplete payload: no X-GitHub-Event header"


def test_hostile_shapes_never_raise_anything_but_value_error():
    odd = {
        "pull_request": {"labels": "nope", "base": [], "number": True, "user": "x"},
        "repository": [],
        "label": {"name": 3},
        "ref": 7,
        "check_run": {"check_suite": 1},
    }
    body = json.dumps(odd).encode()
    fields = GitHubSource().parse(headers(body), body)
    assert fields["labels"] == [] and fields["number"] is None and fields["repo"] is None

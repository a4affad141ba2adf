"""The sentry source over real HTTP: signatures, resources, filters, redeliveries, prompts."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from llamaherd_sentry.source import SentrySource

from llamaherd.api import unrouted
from llamaherd.testing import fuzz_webhook_source

SECRET = "sentry-client-secret"
# Sentry's documented `issue` webhook (docs.sentry.io, integration platform webhooks: issues).
ISSUE_CREATED = {
    "action": "created",
    "actor": {"id": "sentry", "name": "Sentry", "type": "application"},
    "data": {
        "issue": {
            "assignedTo": None,
            "culprit": "?(runner)",
            "id": "1170820242",
            "level": "error",
            "metadata": {"type": "ReferenceError", "value": "blooopy is not defined"},
            "platform": "javascript",
            "project": {"id": "1", "name": "front-end", "platform": "", "slug": "front-end"},
            "shortId": "FRONT-END-9",
            "status": "unresolved",
            "title": "ReferenceError: blooopy is not defined",
            "type": "error",
            "web_url": "https://sentry.io/organizations/acme/issues/1170820242/",
        }
    },
    "installation": {"uuid": "a8e5d37a-696c-4c54-adb5-b3f28d64c7de"},
}
# Sentry's documented `event_alert` webhook, abridged.
ALERT_TRIGGERED = {
    "action": "triggered",
    "actor": {"id": "sentry", "name": "Sentry", "type": "application"},
    "data": {
        "event": {
            "event_id": "e4874d664c3540c1a32eab185f12c5ab",
            "culprit": "?(<anonymous>)",
            "title": "ReferenceError: heck is not defined",
            "web_url": "https://sentry.io/organizations/acme/issues/1117540176/events/e4874d/",
            "issue_id": "1117540176",
        },
        "triggered_rule": "Very Important Alert Rule!",
    },
    "installation": {"uuid": "a8e5d37a-696c-4c54-adb5-b3f28d64c7de"},
}
CONFIG = '[webhooks.sentry]\ntype = "sentry"\n'
AGENTS = {
    "triage": '[[webhooks]]\nsource = "sentry"\nresources = ["issue"]\nprojects = ["front-*"]\n',
    "alerts": '[[webhooks]]\nsource = "sentry"\nresources = ["event_alert"]\n',
    "resolver": '[[webhooks]]\nsource = "sentry"\nresources = "issue"\nactions = "resolved"\n',
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(CONFIG, AGENTS, {("sentry_client_secret", "default"): {"secret": SECRET}})


def signed(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def test_request_headers_are_sentrys():
    body = json.dumps(ISSUE_CREATED).encode()
    sent = SentrySource().request_headers(body, "issue", "req-1", SECRET)
    assert sent["Sentry-Hook-Signature"] == signed(body)
    assert (sent["Sentry-Hook-Resource"], sent["Request-ID"]) == ("issue", "req-1")


def test_issue_fields():
    body = json.dumps(ISSUE_CREATED).encode()
    headers = {"sentry-hook-resource": "issue", "request-id": "r-1"}
    fields = SentrySource().parse(headers, body)
    assert fields["event"] == "issue" and fields["action"] == "created"
    assert fields["project"] == "front-end" and fields["number"] == "FRONT-END-9"
    assert fields["title"] == "ReferenceError: blooopy is not defined"
    assert fields["url"].endswith("/issues/1170820242/") and fields["sender"] == "Sentry"
    assert fields["delivery"] == "r-1"


def test_comment_and_alert_fields():
    comment = {
        "action": "created",
        "actor": {"id": 1, "name": "Meredith", "type": "user"},
        "data": {
            "comment_id": "1234",
            "issue_id": "100",
            "project_slug": "back-end",
            "comment": "looking into it",
        },
    }
    fields = SentrySource().parse({"sentry-hook-resource": "comment"}, json.dumps(comment).encode())
    assert (fields["comment"], fields["project"], fields["sender"]) == (
        "looking into it",
        "back-end",
        "Meredith",
    )
    body = json.dumps(ALERT_TRIGGERED).encode()
    alert = SentrySource().parse({"sentry-hook-resource": "event_alert"}, body)
    assert alert["title"] == "ReferenceError: heck is not defined" and alert["url"]


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", json.dumps({"data": []}).encode()])
def test_odd_bodies(body):
    try:
        fields = SentrySource().parse({"sentry-hook-resource": "issue"}, body)
    except ValueError:
        return
    assert fields["title"] is None


def test_a_resourceless_delivery_is_incomplete():
    """As Action Llama: acknowledged and routed nowhere (issue 42 item 2)."""
    fields = SentrySource().parse({}, b"{}")
    assert unrouted(fields) == "incomplete payload: no Sentry-Hook-Resource header"


def test_signed_issue_queues_a_run_whose_prompt_has_the_fields(server):
    response = server.send("sentry", ISSUE_CREATED, event="issue", delivery="r-1", secret=SECRET)
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["triage"]
    run = server.next_run()
    assert run.agent == "triage"
    block = server.trigger_block(run)
    for line in (
        "source: sentry",
        "event: issue",
        "action: created",
        "project: front-end",
        "title: ReferenceError: blooopy is not defined",
        "url: https://sentry.io/organizations/acme/issues/1170820242/",
        "sender: Sentry",
        "delivery: r-1",
    ):
        assert line in block, line
    assert '      "shortId": "FRONT-END-9",' in block  # the full payload follows


def test_bad_missing_or_other_secret_signatures_are_401(server):
    body = json.dumps(ISSUE_CREATED).encode()
    assert server.send("sentry", ISSUE_CREATED, event="issue", secret="wrong").status_code == 401
    assert server.send("sentry", ISSUE_CREATED, event="issue", secret=None).status_code == 401
    forged = {"Sentry-Hook-Signature": signed(body)[:-1] + "0"}
    response = server.send("sentry", body=body, event="issue", secret=SECRET, headers=forged)
    assert response.status_code == 401
    assert server.depth() == {} and server.next_run() is None


def test_redelivery_is_a_no_op(server):
    first = server.send("sentry", ISSUE_CREATED, event="issue", delivery="same", secret=SECRET)
    again = server.send("sentry", ISSUE_CREATED, event="issue", delivery="same", secret=SECRET)
    assert first.status_code == 202 and again.json() == {"delivery": "same", "duplicate": True}
    assert server.depth() == {"triage": 1}


def test_filters(server):
    elsewhere = json.loads(json.dumps(ISSUE_CREATED))
    elsewhere["data"]["issue"]["project"]["slug"] = "back-end"
    assert server.send("sentry", elsewhere, event="issue", secret=SECRET).json()["agents"] == []
    resolved = {**ISSUE_CREATED, "action": "resolved"}
    assert server.send("sentry", resolved, event="issue", secret=SECRET).json()["agents"] == [
        "resolver",
        "triage",
    ]
    alert = server.send("sentry", ALERT_TRIGGERED, event="event_alert", secret=SECRET)
    assert alert.json()["agents"] == ["alerts"]


def test_wait_filters_use_sentrys_keys(server):
    server.send("sentry", ISSUE_CREATED, event="issue", secret=SECRET)
    run = server.next_run()
    assert server.waits_for(run, {"resource": "issue", "project": "front-*"})
    assert not server.waits_for(run, {"resources": ["event_alert"]})
    assert server.waits_for(run, {"number": "FRONT-END-9"})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "sentry",
        secret=SECRET,
        wrong_secret="not-the-secret",
        header_names=["Sentry-Hook-Signature", "Sentry-Hook-Resource", "Request-ID"],
    )

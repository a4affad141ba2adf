"""The linear source over real HTTP: signatures, webhookTimestamp freshness, events, filters."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest
from llamaherd_linear.source import LinearSource

from llamaherd.testing import fuzz_webhook_source

SECRET = "lin_wh_secret_for_tests"
ORG = "8b3f5c9e-0c6e-4b2e-9a55-1b6f1d6b7a10"
# Shaped like Linear's documented Issue webhook (linear.app/developers/webhooks).
ISSUE_CREATED = {
    "action": "create",
    "actor": {"id": "u-1", "type": "user", "name": "Alice", "email": "alice@acme.dev"},
    "createdAt": "2026-01-05T12:00:00.000Z",
    "data": {
        "id": "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
        "number": 42,
        "identifier": "ENG-42",
        "title": "Checkout fails on Safari",
        "description": "Steps: open checkout in Safari 17.",
        "priority": 2,
        "url": "https://linear.app/acme/issue/ENG-42/checkout-fails-on-safari",
        "team": {"id": "t-1", "key": "ENG", "name": "Engineering"},
        "creator": {"id": "u-1", "name": "Alice", "email": "alice@acme.dev"},
        "assignee": {"id": "u-2", "name": "Bob", "email": "bob@acme.dev"},
        "labels": [{"id": "l-1", "name": "Bug", "color": "#eb5757"}],
    },
    "url": "https://linear.app/acme/issue/ENG-42/checkout-fails-on-safari",
    "type": "Issue",
    "organizationId": ORG,
    "webhookTimestamp": 1767614400000,
    "webhookId": "000042e3-d123-4980-b49f-8e140eef9329",
}
COMMENT_CREATED = {
    "action": "create",
    "actor": {"id": "u-2", "type": "user", "name": "Bob", "email": "bob@acme.dev"},
    "data": {
        "id": "c-1",
        "body": "I can reproduce this on iOS too.",
        "issue": {"id": "i-1", "number": 42, "title": "Checkout fails on Safari", "team": {}},
        "url": "https://linear.app/acme/issue/ENG-42#comment-c1",
    },
    "type": "Comment",
    "organizationId": ORG,
    "webhookTimestamp": 1767614400000,
}
CONFIG = '[webhooks.linear]\ntype = "linear"\n'
AGENTS = {
    "triage": f"""
        [[webhooks]]
        source = "linear"
        events = ["issues"]
        actions = ["create"]
        organizations = ["{ORG}"]
        labels = ["Bug"]
    """,
    "bobs": '[[webhooks]]\nsource = "linear"\nassignee = "BOB@acme.dev"\n',
    "replier": '[[webhooks]]\nsource = "linear"\nevents = "issue_comment"\nauthor = "Alice"\n',
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(
        CONFIG, AGENTS, {("linear_webhook_secret", "default"): {"secret": SECRET}}
    )


def body_at(payload: dict, when: float) -> bytes:
    return json.dumps({**payload, "webhookTimestamp": int(when * 1000)}).encode()


def sign(body: bytes, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"linear-signature": digest, "linear-event": "Issue", "linear-delivery": "d-1"}


def test_verifies_a_fresh_signed_delivery_only():
    source = LinearSource()
    body = body_at(ISSUE_CREATED, time.time())
    assert source.verify(sign(body), body, [SECRET])
    assert not source.verify(sign(body, "other"), body, [SECRET])
    stale = body_at(ISSUE_CREATED, time.time() - 120)
    assert not source.verify(sign(stale), stale, [SECRET]), "older than a minute"
    unstamped = json.dumps({k: v for k, v in ISSUE_CREATED.items() if k != "webhookTimestamp"})
    assert not source.verify(sign(unstamped.encode()), unstamped.encode(), [SECRET])


def test_renew_makes_a_recorded_delivery_fresh():
    renewed = json.loads(LinearSource().renew(json.dumps(ISSUE_CREATED).encode(), "d-2"))
    assert abs(renewed["webhookTimestamp"] / 1000 - time.time()) < 5
    assert renewed["data"] == ISSUE_CREATED["data"]
    assert LinearSource().renew(b"not json", "d-2") == b"not json"


def test_issue_and_comment_fields():
    body = json.dumps(ISSUE_CREATED).encode()
    fields = LinearSource().parse(sign(body), body)
    assert (fields["event"], fields["action"], fields["org"], fields["team"]) == (
        "issues",
        "create",
        ORG,
        "ENG",
    )
    assert (fields["number"], fields["title"], fields["labels"]) == (
        42,
        "Checkout fails on Safari",
        ["Bug"],
    )
    assert (fields["assignee"], fields["author"], fields["sender"]) == (
        "bob@acme.dev",
        "alice@acme.dev",
        "alice@acme.dev",
    )
    assert fields["delivery"] == "d-1" and fields["body"].startswith("Steps:")
    body = json.dumps(COMMENT_CREATED).encode()
    comment = LinearSource().parse({}, body)
    assert (comment["event"], comment["comment"], comment["number"]) == (
        "issue_comment",
        "I can reproduce this on iOS too.",
        42,
    )


def test_request_headers_name_the_entity_type():
    body = json.dumps(ISSUE_CREATED).encode()
    sent = LinearSource().request_headers(body, "issues", "d-9", SECRET)
    assert sent["Linear-Event"] == "Issue" and sent["Linear-Delivery"] == "d-9"
    assert sent["Linear-Signature"] == sign(body)["linear-signature"]


def test_signed_issue_queues_a_run_whose_prompt_has_the_fields(server):
    response = server.send("linear", ISSUE_CREATED, delivery="d-1", secret=SECRET)
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["bobs", "triage"]
    runs = [server.next_run(), server.next_run()]
    block = server.trigger_block(next(r for r in runs if r.agent == "triage"))
    for line in (
        "source: linear",
        "event: issues",
        "action: create",
        f"org: {ORG}",
        "number: 42",
        "title: Checkout fails on Safari",
        "url: https://linear.app/acme/issue/ENG-42/checkout-fails-on-safari",
        "author: alice@acme.dev",
        "assignee: bob@acme.dev",
        'labels: ["Bug"]',
    ):
        assert line in block, line


def test_stale_bad_or_missing_signatures_are_401(server):
    stale = body_at(ISSUE_CREATED, time.time() - 300)
    response = server.send("linear", body=stale, secret=SECRET, renew=False)
    assert response.status_code == 401
    assert server.send("linear", ISSUE_CREATED, secret="wrong").status_code == 401
    assert server.send("linear", ISSUE_CREATED, secret=None).status_code == 401
    assert server.depth() == {} and server.next_run() is None


def test_redelivery_is_a_no_op(server):
    first = server.send("linear", COMMENT_CREATED, delivery="same", secret=SECRET)
    again = server.send("linear", COMMENT_CREATED, delivery="same", secret=SECRET)
    assert first.json()["agents"] == [] and again.json()["duplicate"] is True


def test_filters(server):
    removed = {**ISSUE_CREATED, "action": "remove"}
    assert server.send("linear", removed, secret=SECRET).json()["agents"] == ["bobs"]
    other_org = {**ISSUE_CREATED, "organizationId": "someone-else"}
    assert server.send("linear", other_org, secret=SECRET).json()["agents"] == ["bobs"]
    unassigned = json.loads(json.dumps(ISSUE_CREATED))
    unassigned["data"]["assignee"] = None
    unassigned["data"]["labels"] = [{"name": "Feature"}]
    assert server.send("linear", unassigned, secret=SECRET).json()["agents"] == []
    comment = json.loads(json.dumps(COMMENT_CREATED))
    comment["data"]["issue"]["creator"] = {"name": "Alice"}
    assert server.send("linear", comment, secret=SECRET).json()["agents"] == ["replier"]


def test_wait_filters_use_linears_keys(server):
    server.send("linear", ISSUE_CREATED, secret=SECRET)
    run = server.next_run()
    assert server.waits_for(run, {"event": "issues", "team": "eng", "number": 42})
    assert server.waits_for(run, {"organization": ORG, "label": "Bug"})
    assert not server.waits_for(run, {"assignee": "carol@acme.dev"})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "linear",
        secret=SECRET,
        wrong_secret="not-the-secret",
        header_names=["Linear-Signature", "Linear-Event", "Linear-Delivery"],
    )

"""A captured delivery sent again under a new delivery id is not queued again.

GitHub, Sentry and Linear sign only the body, and the delivery id is a header outside the
signature: whoever captured one delivery could send it again under any id, and each was queued.
Their bodies are unique per event (ids and times inside), so a verified body the source already
delivered, within the history kept, is the same delivery: answered as a duplicate (200), nothing
queued. A generic source keeps taking equal bodies (a sender may post the same payload twice on
purpose); its replay defence is the signed timestamp (``timestampHeader``).
"""

from __future__ import annotations

import json
import time

import pytest

SECRET = "replay-secret"
CONFIG = """
[webhooks.github]
type = "github"

[webhooks.sentry]
type = "sentry"

[webhooks.linear]
type = "linear"

[webhooks.hooks]
type = "generic"
credential = "ci"
"""
AGENTS = {name: f'[[webhooks]]\nsource = "{name}"\n' for name in ("github", "sentry", "linear")}
AGENTS["generic"] = '[[webhooks]]\nsource = "hooks"\n'
CREDENTIALS = {
    ("github_webhook_secret", "default"): {"secret": SECRET},
    ("sentry_client_secret", "default"): {"secret": SECRET},
    ("linear_webhook_secret", "default"): {"secret": SECRET},
    ("webhook_secret", "ci"): {"secret": SECRET},
}
BODIES = {
    "github": (
        "issues",
        {
            "action": "opened",
            "issue": {"id": 1, "number": 7},
            "repository": {"id": 9, "full_name": "acme/app"},
        },
    ),
    "sentry": ("issue", {"action": "created", "data": {"issue": {"id": "42"}}}),
    "linear": (
        "Issue",
        {
            "action": "create",
            "type": "Issue",
            "organizationId": "org-1",
            "data": {"id": "i-1"},
            "webhookTimestamp": 0,
        },
    ),
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(CONFIG, AGENTS, CREDENTIALS)


@pytest.mark.parametrize("source", sorted(BODIES))
def test_a_replay_under_a_new_delivery_id_is_a_duplicate(server, source):
    event, payload = BODIES[source]
    if source == "linear":  # Linear refuses a body whose signed timestamp is a minute old
        payload = {**payload, "webhookTimestamp": int(time.time() * 1000)}
    body = json.dumps(payload).encode()
    first = server.send(source, body=body, event=event, delivery="d-1", secret=SECRET, renew=False)
    assert first.status_code == 202, first.text
    assert first.json()["queued"] == [source]
    replay = server.send(source, body=body, event=event, delivery="d-2", secret=SECRET, renew=False)
    assert replay.status_code == 200, replay.text
    assert replay.json() == {"delivery": "d-2", "duplicate": True}
    assert server.depth() == {source: 1}
    # Another event (another body) of the same source is taken as ever.
    other = {**payload, "action": "deleted"}
    taken = server.send(source, other, event=event, delivery="d-3", secret=SECRET, renew=False)
    assert taken.status_code == 202 and server.depth() == {source: 2}


def test_a_generic_source_keeps_taking_equal_bodies(server):
    for delivery in ("g-1", "g-2"):
        sent = server.send("hooks", {"event": "deploy"}, delivery=delivery, secret=SECRET)
        assert sent.status_code == 202, sent.text
    assert server.depth() == {"generic": 2}


def test_an_unsigned_delivery_cannot_make_a_genuine_one_a_duplicate(webhook_server):
    """On a source that takes unsigned deliveries anyone may send a body first: bodies are
    compared only for verified deliveries."""
    open_github = '[webhooks.github]\ntype = "github"\nallowUnsigned = true\n'
    server = webhook_server(open_github, {"github": AGENTS["github"]}, CREDENTIALS)
    event, payload = BODIES["github"]
    body = json.dumps(payload).encode()
    for delivery in ("u-1", "u-2"):
        sent = server.send("github", body=body, event=event, delivery=delivery, secret=None)
        assert sent.status_code == 202, sent.text
    assert server.depth() == {"github": 2}

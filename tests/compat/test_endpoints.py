"""The scheduler's HTTP endpoints as Action Llama users point services at them: webhooks at
``/webhooks/<type>`` beside ``/webhooks/<source name>``, and ``GET /health``."""

from __future__ import annotations

import json

import requests

ISSUE = {
    "action": "labeled",
    "issue": {"number": 7, "title": "Flaky test", "labels": [{"name": "agent"}]},
    "repository": {"full_name": "acme/app", "owner": {"login": "acme"}},
    "sender": {"login": "alice"},
}
TWO_GITHUB_SOURCES = """
[webhooks.acme]
type = "github"
credential = "acme"

[webhooks.other-org]
type = "github"
credential = "other"

[webhooks.alerts]
type = "sentry"
credential = "prod"
"""
AGENTS = {
    "acme-dev": '[[webhooks]]\nsource = "acme"\nevents = ["issues"]\n',
    "other-dev": '[[webhooks]]\nsource = "other-org"\nevents = ["issues"]\n',
}
CREDENTIALS = {
    ("github_webhook_secret", "acme"): {"secret": "acme-secret"},
    ("github_webhook_secret", "other"): {"secret": "other-secret"},
    ("sentry_client_secret", "prod"): {"secret": "sentry-secret"},
}


def _post(server, path: str, secret: str | None, source: str = "acme", payload=ISSUE):
    """POST to ``path`` as the ``source`` table's sender would, signed with ``secret``."""
    body = json.dumps(payload).encode()
    headers = server.source(source).request_headers(body, "issues", "d-" + path, secret)
    return server.http.post(server.url + path, data=body, headers=headers, timeout=10)


def test_a_delivery_to_the_type_url_goes_to_the_source_whose_secret_signed_it(webhook_server):
    server = webhook_server(TWO_GITHUB_SOURCES, AGENTS, CREDENTIALS)
    answer = _post(server, "/webhooks/github", "other-secret")
    assert answer.status_code == 202, answer.text
    assert answer.json()["agents"] == ["other-dev"]
    answer = _post(server, "/webhooks/github", "acme-secret")
    assert answer.json()["agents"] == ["acme-dev"]
    assert server.depth() == {"acme-dev": 1, "other-dev": 1}
    forged = _post(server, "/webhooks/github", "nobody's secret")
    assert forged.status_code == 401
    assert _post(server, "/webhooks/gitlab", "acme-secret").status_code == 404
    assert server.depth() == {"acme-dev": 1, "other-dev": 1}


def test_the_only_source_of_a_type_takes_its_type_url(webhook_server):
    server = webhook_server(
        '[webhooks.my-github]\ntype = "github"\ncredential = "acme"\n',
        {"dev": '[[webhooks]]\nsource = "my-github"\n'},
        CREDENTIALS,
    )
    by_type = _post(server, "/webhooks/github", "acme-secret", source="my-github")
    # Another event: the same signed body again would be a replay (answered as a duplicate).
    edited = {**ISSUE, "action": "edited"}
    by_name = _post(
        server, "/webhooks/my-github", "acme-secret", source="my-github", payload=edited
    )
    assert (by_type.status_code, by_name.status_code) == (202, 202)
    assert by_type.json()["agents"] == by_name.json()["agents"] == ["dev"]
    assert _post(server, "/webhooks/github", None, source="my-github").status_code == 401


def test_health_answers_as_action_llama_does_without_a_token(webhook_server):
    server = webhook_server("")
    answer = requests.get(server.url + "/health", timeout=10)
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    # Action Llama's dashboard address lands on ours.
    moved = requests.get(server.url + "/dashboard", allow_redirects=False, timeout=10)
    assert (moved.status_code, moved.headers["location"]) == (308, "/")

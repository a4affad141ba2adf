"""A real Engine serving the real app (control API + every plugin's routes) on 127.0.0.1."""

from __future__ import annotations

import json
import uuid

import pytest
import requests

SECRET = "webhook-test-secret"

PROJECT = """
[webhooks.github]
type = "github"

[webhooks.hooks]
type = "generic"
credential = "ci"
signatureHeader = "X-Hook-Signature"

[webhooks.open]
type = "generic"
allowUnsigned = true
"""

AGENTS = {
    "reviewer": """
        [[webhooks]]
        source = "github"
        events = ["pull_request"]
        actions = ["opened", "reopened"]
        repos = ["acme/widgets"]
        branches = ["main"]
    """,
    "pusher": """
        [[webhooks]]
        source = "github"
        events = ["push"]
        branches = ["release/*"]
    """,
    "labeller": """
        [[webhooks]]
        source = "github"
        events = ["pull_request"]
        repos = ["acme/other"]
        labels = ["triage"]
    """,
    "deployer": """
        [[webhooks]]
        source = "hooks"
        events = ["deploy"]
        match = { "env" = ["prod", "staging"] }
    """,
    "anything": """
        [[webhooks]]
        source = "open"
    """,
    "quiet": "",
}


def pull_request(action="opened", repo="acme/widgets", head="main", labels=()):
    """A pull request from branch ``head`` (what `branches` filters match, as in Action
    Llama) into ``release``."""
    return {
        "action": action,
        "number": 7,
        "pull_request": {
            "number": 7,
            "title": "Fix it",
            "user": {"login": "alice"},
            "labels": [{"name": n} for n in labels],
            "base": {"ref": "release"},
            "head": {"ref": head},
        },
        "repository": {"full_name": repo, "owner": {"login": repo.split("/")[0]}},
        "sender": {"login": "alice"},
    }


class Server:
    """The engine, its URL and a client that signs like the real senders."""

    secret = SECRET
    pull_request = staticmethod(pull_request)

    def __init__(self, engine):
        self.engine = engine
        self.url = engine.gateway_url
        self.http = requests.Session()
        self.registry = engine.registry

    def send(
        self,
        source,
        payload,
        *,
        event="pull_request",
        delivery=None,
        secret=SECRET,
        body=None,
        headers=None,
    ):
        """POST a delivery to /webhooks/<source>, signed with ``secret`` (None: unsigned)."""
        kind = self.engine.project.config["webhooks"][source].get("type", "generic")
        sender = self.registry.webhook_sources[kind].configured(
            self.engine.project.config["webhooks"][source]
        )
        raw = body if body is not None else json.dumps(payload).encode()
        sent = sender.request_headers(raw, event, delivery or str(uuid.uuid4()), secret)
        sent.update(headers or {})
        return self.http.post(f"{self.url}/webhooks/{source}", data=raw, headers=sent, timeout=10)

    def receipts(self, dead_letters=False):
        from llamaherd_webhooks.receipts import Receipts

        return Receipts(self.engine.store).recent(dead_letters=dead_letters)

    def depth(self):
        return {k: v for k, v in self.engine.store.queue_depth().items() if v}


@pytest.fixture
def server(tmp_project, tmp_path, monkeypatch):
    from llamaherd.api import CredentialStore, Engine

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    credentials = CredentialStore()
    credentials.write("github_webhook_secret", "default", {"secret": SECRET})
    credentials.write("webhook_secret", "ci", {"secret": SECRET})
    tmp_project.config(PROJECT)
    for name, config in AGENTS.items():
        tmp_project.add_agent(name, config)
    engine = Engine(tmp_project.load())
    engine.serve("127.0.0.1", 0)
    try:
        yield Server(engine)
    finally:
        engine.close()

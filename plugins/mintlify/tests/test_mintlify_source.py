"""The mintlify source over real HTTP: signatures, fields, filters, prompts.

Mintlify publishes no example delivery; these are shaped as Action Llama's source reads them.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from llamaherd_mintlify.source import MintlifySource

from llamaherd.testing import fuzz_webhook_source

SECRET = "mintlify-shared-secret"
FAILED = {
    "event": "deployment",
    "action": "failed",
    "project": "acme-docs",
    "branch": "main",
    "title": "Deployment of acme-docs",
    "error": "Broken link in /quickstart",
    "url": "https://dashboard.mintlify.com/acme/acme-docs/deployments/42",
    "user": {"email": "writer@acme.dev", "name": "Writer"},
    "timestamp": "2026-01-05T12:00:00Z",
}
SUCCEEDED = {**FAILED, "action": "succeeded", "branch": "release/2.0", "error": None}
CONFIG = '[webhooks.docs]\ntype = "mintlify"\n'
AGENTS = {
    "fixer": '[[webhooks]]\nsource = "docs"\nactions = ["failed"]\nprojects = ["acme-docs"]\n',
    "releaser": '[[webhooks]]\nsource = "docs"\nevents = "deployment.succeeded"\nbranches = "release/*"\n',
    "legacy": '[[webhooks]]\nsource = "docs"\nrepos = ["acme-docs"]\nbranches = ["main"]\n',
}


@pytest.fixture
def server(webhook_server):
    return webhook_server(
        CONFIG, AGENTS, {("mintlify_webhook_secret", "default"): {"secret": SECRET}}
    )


def digest(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    "headers",
    [
        lambda b: {"x-mintlify-signature": digest(b)},
        lambda b: {"mintlify-signature": digest(b)},
        lambda b: {"x-mintlify-signature": "sha256=" + digest(b)},
    ],
)
def test_signature_header_spellings(headers):
    body = json.dumps(FAILED).encode()
    assert MintlifySource().verify(headers(body), body, [SECRET])
    assert not MintlifySource().verify(headers(body), body, ["other"])


def test_configured_signature_header():
    body = b"{}"
    source = MintlifySource().configured({"type": "mintlify", "signatureHeader": "X-Docs-Sig"})
    assert source.verify({"x-docs-sig": digest(body)}, body, [SECRET])
    assert source.request_headers(body, None, "d", SECRET) == {
        "Content-Type": "application/json",
        "X-Docs-Sig": digest(body),
    }


def test_fields():
    fields = MintlifySource().parse({}, json.dumps(FAILED).encode())
    assert (fields["event"], fields["action"], fields["project"], fields["branch"]) == (
        "deployment",
        "failed",
        "acme-docs",
        "main",
    )
    assert (fields["conclusion"], fields["body"], fields["sender"]) == (
        "failure",
        "Build failed: Broken link in /quickstart",
        "writer@acme.dev",
    )
    bare = MintlifySource().parse({}, b'{"status": "succeeded"}')
    assert (bare["event"], bare["action"], bare["title"], bare["conclusion"]) == (
        "build",
        "succeeded",
        "Build succeeded",
        "success",
    )


def test_signed_failure_queues_a_run_whose_prompt_has_the_fields(server):
    response = server.send("docs", FAILED, secret=SECRET)
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["fixer", "legacy"]
    block = server.trigger_block(server.next_run())
    for line in (
        "source: docs",
        "event: deployment",
        "action: failed",
        "project: acme-docs",
        "url: https://dashboard.mintlify.com/acme/acme-docs/deployments/42",
        "sender: writer@acme.dev",
        "branch: main",
        "conclusion: failure",
        "body: Build failed: Broken link in /quickstart",
    ):
        assert line in block, line


def test_bad_or_missing_signatures_are_401(server):
    assert server.send("docs", FAILED, secret="wrong").status_code == 401
    assert server.send("docs", FAILED, secret=None).status_code == 401
    assert server.depth() == {} and server.next_run() is None


def test_the_same_body_twice_is_one_delivery(server):
    assert server.send("docs", SUCCEEDED, secret=SECRET).status_code == 202
    again = server.send("docs", SUCCEEDED, secret=SECRET)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert server.depth() == {"releaser": 1}


def test_filters(server):
    other = {**FAILED, "project": "other-docs"}
    assert server.send("docs", other, secret=SECRET).json()["agents"] == []
    unbranched = {k: v for k, v in SUCCEEDED.items() if k != "branch"}
    # As in Action Llama, a build without a branch is of "main".
    assert server.send("docs", unbranched, secret=SECRET).json()["agents"] == ["legacy"]


def test_wait_filters_use_mintlifys_keys(server):
    server.send("docs", FAILED, secret=SECRET)
    run = server.next_run()
    assert server.waits_for(run, {"project": "acme-docs", "action": "failed"})
    assert not server.waits_for(run, {"branch": "release/*"})


def test_signature_fuzz(server):
    fuzz_webhook_source(
        server,
        "docs",
        secret=SECRET,
        wrong_secret="not-the-secret",
        header_names=["X-Mintlify-Signature", "Mintlify-Signature"],
    )

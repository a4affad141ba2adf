"""Mintlify credential types: registered, env names and context as Action Llama's."""

from __future__ import annotations

from llamaherd_mintlify.credentials import MintlifyToken, MintlifyWebhookSecret

from llamaherd.plugins import registry


def test_registered_by_the_plugin():
    owners = registry().owner
    for name in ("mintlify_token", "mintlify_webhook_secret"):
        assert owners[("credential_types", name)] == "mintlify"
    assert owners[("webhook_sources", "mintlify")] == "mintlify"


def test_env_and_context():
    assert MintlifyToken().env({"token": "t"}, None) == {"MINTLIFY_API_TOKEN": "t"}
    assert "MINTLIFY_API_TOKEN" in MintlifyToken().context({})
    assert not hasattr(MintlifyToken(), "validate"), "Mintlify has no identity endpoint"
    assert MintlifyWebhookSecret().sandbox is False
    assert MintlifyWebhookSecret().env({"secret": "s"}, None) == {}

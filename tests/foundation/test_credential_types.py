"""Every credential type of Action Llama 0.29.1 has a first-party plugin, and `al creds types`
and `al plugins` show each installed one with the plugin that registers it."""

from __future__ import annotations

import json

from llamaherd.plugins import PROVIDED_BY, entrypoint_distributions

# dist/credentials/builtins/index.js of @action-llama/action-llama 0.29.1: 32 types.
PEER_TYPES = (
    "github_token", "anthropic_key", "openai_key", "groq_key", "google_key", "xai_key",
    "mistral_key", "openrouter_key", "custom_key", "sentry_token", "linear_token",
    "linear_oauth", "git_ssh", "github_webhook_secret", "sentry_client_secret",
    "linear_webhook_secret", "netlify_token", "x_twitter_api", "x_twitter_user_oauth1",
    "x_twitter_user_oauth2", "bugsnag_token", "vultr_api_key", "hetzner_api_key", "vps_ssh",
    "cloudflare_api_token", "reddit_oauth", "mintlify_token", "mintlify_webhook_secret",
    "discord_bot", "slack_bot_token", "slack_signing_secret", "gcp_service_account",
)  # fmt: skip


def test_every_peer_type_has_a_first_party_distribution():
    assert len(set(PEER_TYPES)) == 32
    missing = [name for name in PEER_TYPES if ("credential_types", name) not in PROVIDED_BY]
    assert missing == []


def test_installed_types_are_listed_with_the_plugin_that_registers_them(al):
    plugin_of_dist = {dist: name for name, (dist, _) in entrypoint_distributions().items()}
    expected = {
        name: plugin_of_dist[PROVIDED_BY[("credential_types", name)]]
        for name in PEER_TYPES
        if PROVIDED_BY[("credential_types", name)] in plugin_of_dist
    }
    # This checkout's own plugins at least: model keys, GitHub's and credentials-extra's.
    assert {"groq_key", "google_key", "custom_key", "vps_ssh", "reddit_oauth"} <= set(expected)

    listed = {
        row["type"]: row["plugin"] for row in json.loads(al("creds", "types", "--json").stdout)
    }
    assert {name: listed.get(name) for name in expected} == expected

    plugins = {row["name"]: row for row in json.loads(al("plugins", "--json").stdout)}
    for name, plugin in expected.items():
        assert f"credential-type:{name}" in plugins[plugin]["registers"]

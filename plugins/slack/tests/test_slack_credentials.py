"""Slack credential types: env, context, and `al creds test` against a local server speaking
Slack's Web API (``auth.test``)."""

from __future__ import annotations

import pytest
from llamaherd_slack.credentials import SlackBotToken, SlackSigningSecret

from llamaherd.api import CredentialInvalid
from llamaherd.plugins import registry

GOOD = "xoxb-good-token-for-tests"


def auth_test(request):
    """Slack's ``POST /api/auth.test``: 200 either way, ``ok`` false for a bad token."""
    if request["headers"].get("authorization") == f"Bearer {GOOD}":
        return 200, {"ok": True, "team": "Acme", "user": "herdbot", "team_id": "T1", "bot_id": "B1"}
    return 200, {"ok": False, "error": "invalid_auth"}


@pytest.fixture
def slack(fake_service, monkeypatch):
    service = fake_service({("POST", "/api/auth.test"): auth_test})
    monkeypatch.setenv("AL_SLACK_API_URL", f"{service.url}/api")
    return service


def test_registered_by_the_plugin():
    owners = registry().owner
    for name in ("slack_bot_token", "slack_signing_secret"):
        assert owners[("credential_types", name)] == "slack"
    assert owners[("webhook_sources", "slack")] == "slack"


def test_env_and_context():
    assert SlackBotToken().env({"token": "t"}, None) == {"SLACK_BOT_TOKEN": "t"}
    assert "SLACK_BOT_TOKEN" in SlackBotToken().context({})
    assert (
        SlackSigningSecret().sandbox is False
        and SlackSigningSecret().env({"secret": "s"}, None) == {}
    )


def test_validate_calls_auth_test(slack):
    assert SlackBotToken().validate({"token": GOOD}) == "authenticated as herdbot in Acme"
    with pytest.raises(CredentialInvalid, match=r"Slack refused the token \(invalid_auth\)"):
        SlackBotToken().validate({"token": "xoxb-revoked"})


def test_signing_secret_is_checked_locally():
    assert "checked locally" in SlackSigningSecret().validate({"secret": "8f742231b10e8888"})
    with pytest.raises(CredentialInvalid, match="at least 8 characters"):
        SlackSigningSecret().validate({"secret": "abc"})

"""discord_bot: env, context, and `al creds test` against a local server speaking Discord's
REST API (``GET /users/@me``)."""

from __future__ import annotations

import pytest
from llamaherd_discord.credentials import DiscordBot

from llamaherd.api import CredentialInvalid
from llamaherd.plugins import registry

TOKEN = "MTA.good-bot-token"
VALUES = {"application_id": "1234", "public_key": "ab" * 32, "bot_token": TOKEN}


def users_me(request):
    if request["headers"].get("authorization") == f"Bot {TOKEN}":
        return 200, {"id": "1234", "username": "herdbot", "bot": True}
    return 401, {"message": "401: Unauthorized", "code": 0}


@pytest.fixture
def discord(fake_service, monkeypatch):
    service = fake_service({("GET", "/api/v10/users/@me"): users_me})
    monkeypatch.setenv("AL_DISCORD_API_URL", f"{service.url}/api/v10")
    return service


def test_registered_by_the_plugin():
    owners = registry().owner
    assert owners[("credential_types", "discord_bot")] == "discord"
    assert owners[("webhook_sources", "discord")] == "discord"


def test_env_and_context():
    assert DiscordBot().env(VALUES, None) == {
        "DISCORD_APPLICATION_ID": "1234",
        "DISCORD_PUBLIC_KEY": "ab" * 32,
        "DISCORD_BOT_TOKEN": TOKEN,
    }
    assert [f.name for f in DiscordBot().fields if f.secret] == ["bot_token"]
    assert "@original" in DiscordBot().context(VALUES)


def test_validate_names_the_bot(discord):
    assert DiscordBot().validate(VALUES) == "bot herdbot (id 1234)"
    with pytest.raises(CredentialInvalid, match=r"Discord refused the credential \(401\)"):
        DiscordBot().validate({**VALUES, "bot_token": "revoked"})


@pytest.mark.parametrize("key", ["", "ab" * 31, "zz" * 32, "ab" * 33])
def test_validate_refuses_a_malformed_public_key(key, discord):
    with pytest.raises(CredentialInvalid, match="64 hex characters"):
        DiscordBot().validate({**VALUES, "public_key": key})
    assert discord.requests == []

"""The ``discord_bot`` credential type, as Action Llama stores it: a Discord application's id
and public key (which verifies its interactions) and its bot's token."""

from __future__ import annotations

import os
import string

from llamaherd.api import CredentialField, CredentialInvalid, ServiceCredential, call_service

DEFAULT_API_URL = "https://discord.com/api/v10"


def api_url() -> str:
    """Discord's REST API: ``$AL_DISCORD_API_URL`` (tests, a proxy) or discord.com/api/v10."""
    return os.environ.get("AL_DISCORD_API_URL", DEFAULT_API_URL).rstrip("/")


class DiscordBot(ServiceCredential):
    name = "discord_bot"
    description = "Discord application: application id, public key and bot token"
    fields = [
        CredentialField(
            "application_id", secret=False, description="General Information > Application ID"
        ),
        CredentialField(
            "public_key",
            secret=False,
            description="General Information > Public Key (verifies interactions)",
        ),
        CredentialField("bot_token", secret=True, description="Bot > Token"),
    ]
    env_vars = {
        "application_id": "DISCORD_APPLICATION_ID",
        "public_key": "DISCORD_PUBLIC_KEY",
        "bot_token": "DISCORD_BOT_TOKEN",
    }
    usage = (
        "`DISCORD_APPLICATION_ID`, `DISCORD_PUBLIC_KEY`, `DISCORD_BOT_TOKEN`: call the REST API "
        "(https://discord.com/api/v10/) with `Authorization: Bot $DISCORD_BOT_TOKEN`. A slash "
        "command's run starts with the interaction deferred: post the answer within 15 minutes "
        "with `PATCH /webhooks/$DISCORD_APPLICATION_ID/<interaction token>/messages/@original` "
        "(the token is in the trigger's payload)."
    )

    def validate(self, values: dict[str, str]) -> str:
        """The public key is 32 bytes of hex; the bot token names its bot (``/users/@me``)."""
        key = values["public_key"].strip()
        if len(key) != 64 or not set(key) <= set(string.hexdigits):
            raise CredentialInvalid(
                "public_key: expected the application's 64 hex characters (General Information "
                "> Public Key)"
            )
        url = f"{api_url()}/users/@me"
        data = call_service("Discord", url, headers={"Authorization": f"Bot {values['bot_token']}"})
        name = data.get("username", "?") if isinstance(data, dict) else "?"
        return f"bot {name} (id {data.get('id', '?') if isinstance(data, dict) else '?'})"

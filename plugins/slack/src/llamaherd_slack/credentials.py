"""Slack credential types, named as Action Llama stores them: ``slack_bot_token`` (the bot's
OAuth token, for agents) and ``slack_signing_secret`` (signs the app's requests: scheduler
only)."""

from __future__ import annotations

import os

from llamaherd.api import (
    CredentialField,
    CredentialInvalid,
    ServiceCredential,
    call_service,
    check_secret,
)

DEFAULT_API_URL = "https://slack.com/api"


def api_url() -> str:
    """Slack's Web API: ``$AL_SLACK_API_URL`` (tests, a proxy) or slack.com/api."""
    return os.environ.get("AL_SLACK_API_URL", DEFAULT_API_URL).rstrip("/")


class SlackBotToken(ServiceCredential):
    name = "slack_bot_token"
    description = "Slack bot user OAuth token"
    fields = [
        CredentialField("token", secret=True, description="Slack bot user OAuth token (xoxb-...)")
    ]
    env_vars = {"token": "SLACK_BOT_TOKEN"}
    usage = (
        "`SLACK_BOT_TOKEN`: a Slack bot token; the Web API (https://slack.com/api/<method>) "
        "takes it as `Authorization: Bearer $SLACK_BOT_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        """``auth.test``: Slack answers 200 with ``ok`` false and an error code for a bad
        token, else the bot's user and workspace."""
        url = f"{api_url()}/auth.test"
        data = call_service(
            "Slack", url, method="POST", headers={"Authorization": f"Bearer {values['token']}"}
        )
        if not isinstance(data, dict) or data.get("ok") is not True:
            error = data.get("error") if isinstance(data, dict) else None
            raise CredentialInvalid(f"Slack refused the token ({error or 'no ok'}) at {url}")
        return f"authenticated as {data.get('user') or '?'} in {data.get('team') or '?'}"


class SlackSigningSecret(ServiceCredential):
    name = "slack_signing_secret"
    description = "Signing secret of a Slack app (X-Slack-Signature)"
    fields = [
        CredentialField(
            "secret",
            secret=True,
            description="Slack app signing secret (App Settings > Basic Information > App Credentials)",
        )
    ]
    sandbox = False  # only the scheduler checks signatures
    usage = "Slack signing secret (used by the scheduler to verify requests; nothing exported)."

    def validate(self, values: dict[str, str]) -> str:
        return check_secret("Slack", values["secret"])


CREDENTIAL_TYPES = [SlackBotToken(), SlackSigningSecret()]

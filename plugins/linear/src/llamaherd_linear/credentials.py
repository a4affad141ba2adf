"""Linear credential types, named as Action Llama stores them: ``linear_token`` (a personal API
key), ``linear_oauth`` (an OAuth application's client and tokens) and ``linear_webhook_secret``
(signs webhooks: scheduler only). The API keys are checked with a ``viewer`` query."""

from __future__ import annotations

import os

from llamaherd.api import (
    CredentialField,
    CredentialInvalid,
    ServiceCredential,
    call_service,
    check_secret,
)

DEFAULT_API_URL = "https://api.linear.app"
VIEWER = "query { viewer { id name email } }"


def api_url() -> str:
    """Linear's API: ``$AL_LINEAR_API_URL`` (tests, a proxy) or api.linear.app."""
    return os.environ.get("AL_LINEAR_API_URL", DEFAULT_API_URL).rstrip("/")


def viewer(authorization: str) -> str:
    """Who the key belongs to, asked with Linear's GraphQL ``viewer`` query."""
    url = f"{api_url()}/graphql"
    data = call_service(
        "Linear",
        url,
        method="POST",
        headers={"Authorization": authorization},
        body={"query": VIEWER},
    )
    found = data.get("data") if isinstance(data, dict) else None
    user = found.get("viewer") if isinstance(found, dict) else None
    if not isinstance(user, dict):  # GraphQL answers 200 with "errors" for a bad key
        raise CredentialInvalid(f"Linear did not accept the key at {url}")
    return f"authenticated as {user.get('name') or '?'} <{user.get('email') or '?'}>"


class LinearToken(ServiceCredential):
    name = "linear_token"
    description = "Linear personal API key"
    fields = [
        CredentialField("token", secret=True, description="Linear personal API key (lin_api_...)")
    ]
    env_vars = {"token": "LINEAR_API_TOKEN"}
    usage = (
        "`LINEAR_API_TOKEN`: a Linear personal API key; the GraphQL API "
        "(https://api.linear.app/graphql) takes it as `Authorization: $LINEAR_API_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        return viewer(values["token"])


class LinearOAuth(ServiceCredential):
    name = "linear_oauth"
    description = "Linear OAuth application: client id and secret, access and refresh tokens"
    fields = [
        CredentialField("client_id", secret=False, description="OAuth application client ID"),
        CredentialField(
            "client_secret", secret=True, description="OAuth application client secret"
        ),
        CredentialField("access_token", secret=True, description="OAuth2 access token"),
        CredentialField("refresh_token", secret=True, description="OAuth2 refresh token"),
    ]
    env_vars = {
        "client_id": "LINEAR_CLIENT_ID",
        "client_secret": "LINEAR_CLIENT_SECRET",
        "access_token": "LINEAR_ACCESS_TOKEN",
        "refresh_token": "LINEAR_REFRESH_TOKEN",
    }
    usage = (
        "`LINEAR_ACCESS_TOKEN` (with `LINEAR_REFRESH_TOKEN`, `LINEAR_CLIENT_ID`, "
        "`LINEAR_CLIENT_SECRET`): Linear OAuth; the GraphQL API takes "
        "`Authorization: Bearer $LINEAR_ACCESS_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        return viewer(f"Bearer {values['access_token']}")


class LinearWebhookSecret(ServiceCredential):
    name = "linear_webhook_secret"
    description = "Signing secret of a Linear webhook (Linear-Signature)"
    fields = [CredentialField("secret", secret=True, description="the webhook's signing secret")]
    sandbox = False  # only the scheduler checks signatures
    usage = "Linear webhook secret (used by the scheduler to verify webhooks; nothing exported)."

    def validate(self, values: dict[str, str]) -> str:
        return check_secret("Linear", values["secret"])


CREDENTIAL_TYPES = [LinearToken(), LinearOAuth(), LinearWebhookSecret()]

"""X (Twitter) credential types, named as Action Llama stores them: ``x_twitter_api`` (the
app's consumer key and secret, which signs webhooks, and its bearer token),
``x_twitter_user_oauth1`` and ``x_twitter_user_oauth2`` (a bot user's tokens)."""

from __future__ import annotations

import os

from llamaherd.api import CredentialField, CredentialInvalid, ServiceCredential, call_service

DEFAULT_API_URL = "https://api.x.com"


def api_url() -> str:
    """X's API: ``$AL_X_API_URL`` (tests, a proxy) or api.x.com."""
    return os.environ.get("AL_X_API_URL", DEFAULT_API_URL).rstrip("/")


class XTwitterApi(ServiceCredential):
    name = "x_twitter_api"
    description = "X (Twitter) app credentials: consumer key and secret, bearer token"
    fields = [
        CredentialField("consumer_key", secret=True, description="OAuth 1.0a Consumer Key"),
        CredentialField(
            "consumer_secret",
            secret=True,
            description="OAuth 1.0a Consumer Secret (also signs the app's webhooks)",
        ),
        CredentialField("bearer_token", secret=True, description="App-only bearer token"),
    ]
    env_vars = {
        "consumer_key": "X_CONSUMER_KEY",
        "consumer_secret": "X_CONSUMER_SECRET",
        "bearer_token": "X_BEARER_TOKEN",
    }
    usage = (
        "`X_CONSUMER_KEY`, `X_CONSUMER_SECRET`, `X_BEARER_TOKEN`: X API v2 "
        "(https://api.x.com/2/); app-only calls take `Authorization: Bearer $X_BEARER_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        """An app-only search (``/2/users/me`` needs a user): the bearer token is accepted."""
        url = f"{api_url()}/2/tweets/search/recent?query=test&max_results=10"
        call_service("X", url, headers={"Authorization": f"Bearer {values['bearer_token']}"})
        return "the bearer token is accepted (app-only search)"


class XTwitterUserOAuth1(ServiceCredential):
    name = "x_twitter_user_oauth1"
    description = "X (Twitter) bot user's OAuth 1.0a access token and secret"
    fields = [
        CredentialField("access_token", secret=True, description="OAuth 1.0a Access Token"),
        CredentialField(
            "access_token_secret", secret=True, description="OAuth 1.0a Access Token Secret"
        ),
    ]
    env_vars = {"access_token": "X_ACCESS_TOKEN", "access_token_secret": "X_ACCESS_TOKEN_SECRET"}
    usage = (
        "`X_ACCESS_TOKEN`, `X_ACCESS_TOKEN_SECRET`: OAuth 1.0a user context for the X API "
        "(signed with the app's `X_CONSUMER_KEY` and `X_CONSUMER_SECRET`)."
    )


class XTwitterUserOAuth2(ServiceCredential):
    name = "x_twitter_user_oauth2"
    description = "X (Twitter) bot user's OAuth 2.0 client and tokens"
    fields = [
        CredentialField("client_id", secret=True, description="OAuth 2.0 Client ID"),
        CredentialField("client_secret", secret=True, description="OAuth 2.0 Client Secret"),
        CredentialField("access_token", secret=True, description="OAuth 2.0 user access token"),
        CredentialField("refresh_token", secret=True, description="OAuth 2.0 refresh token"),
    ]
    env_vars = {
        "client_id": "X_OAUTH2_CLIENT_ID",
        "client_secret": "X_OAUTH2_CLIENT_SECRET",
        "access_token": "X_OAUTH2_ACCESS_TOKEN",
        "refresh_token": "X_OAUTH2_REFRESH_TOKEN",
    }
    usage = (
        "`X_OAUTH2_ACCESS_TOKEN` (with `X_OAUTH2_REFRESH_TOKEN`, `X_OAUTH2_CLIENT_ID`, "
        "`X_OAUTH2_CLIENT_SECRET`): OAuth 2.0 user context for X API v2 (DMs, posts); calls "
        "take `Authorization: Bearer $X_OAUTH2_ACCESS_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        """``/2/users/me``: the user the access token acts for."""
        url = f"{api_url()}/2/users/me"
        data = call_service("X", url, headers={"Authorization": f"Bearer {values['access_token']}"})
        user = data.get("data") if isinstance(data, dict) else None
        if not isinstance(user, dict):
            raise CredentialInvalid(f"X did not name the token's user at {url}")
        return f"authenticated as @{user.get('username') or '?'}"


CREDENTIAL_TYPES = [XTwitterApi(), XTwitterUserOAuth1(), XTwitterUserOAuth2()]

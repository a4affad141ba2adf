"""Sentry credential types, named as Action Llama stores them: ``sentry_token/<i>/token``
(SENTRY_AUTH_TOKEN, for agents) and ``sentry_client_secret/<i>/secret`` (the integration's
client secret, which signs its webhooks: scheduler only)."""

from __future__ import annotations

import os

from llamaherd.api import CredentialField, CredentialInvalid, ServiceCredential, call_service

DEFAULT_API_URL = "https://sentry.io/api/0"


def api_url() -> str:
    """Sentry's API root: ``$AL_SENTRY_API_URL`` (self-hosted Sentry, tests) or sentry.io."""
    return os.environ.get("AL_SENTRY_API_URL", DEFAULT_API_URL).rstrip("/")


class SentryToken(ServiceCredential):
    name = "sentry_token"
    description = "Sentry auth token for sentry-cli and the Sentry API"
    fields = [CredentialField("token", secret=True, description="Sentry auth token (sntrys_...)")]
    env_vars = {"token": "SENTRY_AUTH_TOKEN"}
    usage = (
        "`SENTRY_AUTH_TOKEN`: a Sentry auth token; `sentry-cli` reads it, and the Sentry API "
        "takes it as `Authorization: Bearer $SENTRY_AUTH_TOKEN` (use `curl`)."
    )

    def validate(self, values: dict[str, str]) -> str:
        """GET the API root with the token: Sentry answers with the token's user and scopes."""
        url = f"{api_url()}/"
        data = call_service("Sentry", url, headers={"Authorization": f"Bearer {values['token']}"})
        auth = data.get("auth") if isinstance(data, dict) else None
        if not isinstance(auth, dict):  # the root answers 200 without "auth" to no token
            raise CredentialInvalid(f"Sentry did not accept the token at {url}")
        user = data.get("user") if isinstance(data.get("user"), dict) else {}
        scopes = ", ".join(map(str, auth.get("scopes") or [])) or "(none)"
        return f"authenticated as {user.get('email') or '?'}; scopes: {scopes}"


class SentryClientSecret(ServiceCredential):
    name = "sentry_client_secret"
    description = (
        "Client secret of a Sentry integration: verifies its webhooks (Sentry-Hook-Signature)"
    )
    fields = [
        CredentialField(
            "secret", secret=True, description="from your Sentry integration's settings"
        )
    ]
    sandbox = False  # only the scheduler checks signatures
    usage = "Sentry client secret (used by the scheduler to verify webhooks; nothing exported)."


CREDENTIAL_TYPES = [SentryToken(), SentryClientSecret()]

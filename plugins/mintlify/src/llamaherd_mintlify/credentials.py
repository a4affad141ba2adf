"""Mintlify credential types, named as Action Llama stores them: ``mintlify_token`` (the API
token, for agents) and ``mintlify_webhook_secret`` (signs webhooks: scheduler only). Mintlify
has no identity endpoint to test a token against, so neither has an online check."""

from __future__ import annotations

from llamaherd.api import CredentialField, ServiceCredential


class MintlifyToken(ServiceCredential):
    name = "mintlify_token"
    description = "Mintlify API token: build logs, rebuilds, documentation projects"
    fields = [CredentialField("token", secret=True, description="Mintlify API token")]
    env_vars = {"token": "MINTLIFY_API_TOKEN"}
    usage = (
        "`MINTLIFY_API_TOKEN`: a Mintlify API token (build logs, rebuilds, projects); the API "
        "takes it as `Authorization: Bearer $MINTLIFY_API_TOKEN`."
    )


class MintlifyWebhookSecret(ServiceCredential):
    name = "mintlify_webhook_secret"
    description = "Shared secret of a Mintlify webhook (X-Mintlify-Signature)"
    fields = [
        CredentialField(
            "secret", secret=True, description="the same value as in Mintlify's webhook settings"
        )
    ]
    sandbox = False  # only the scheduler checks signatures
    usage = "Mintlify webhook secret (used by the scheduler to verify webhooks; nothing exported)."


CREDENTIAL_TYPES = [MintlifyToken(), MintlifyWebhookSecret()]

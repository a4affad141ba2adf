"""``gateway_api_key``: Action Llama's key for its gateway and dashboard.

Action Llama creates it at ``gateway_api_key/default/key`` and scripts send it as
``Authorization: Bearer``; llamaherd's scheduler accepts it there as it accepts its control token
(core reads the stored key itself, with this plugin or without it). This type lets ``al creds
add gateway_api_key`` store or rotate one and ``al creds ls`` name it; it is never staged into
a sandbox.
"""

from __future__ import annotations

from pathlib import Path

from llamaherd.api import CredentialField


class GatewayApiKey:
    name = "gateway_api_key"
    description = "Action Llama's gateway API key: also a bearer for the control API"
    fields = [CredentialField("key", secret=True, description="The API key")]
    sandbox = False

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {}

    def context(self, values: dict[str, str]) -> str:
        return ""

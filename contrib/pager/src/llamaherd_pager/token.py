"""The ``pager_token`` credential type: a PagerDuty REST API key exported as PAGERDUTY_TOKEN."""

from __future__ import annotations

import os
from pathlib import Path

from llamaherd.api import CredentialField, call_service

DEFAULT_API_URL = "https://api.pagerduty.com"


def api_url() -> str:
    """PagerDuty's REST API: ``$AL_PAGERDUTY_API_URL`` (tests, a proxy) or api.pagerduty.com."""
    return os.environ.get("AL_PAGERDUTY_API_URL", DEFAULT_API_URL).rstrip("/")


class PagerToken:
    """Stored at ``<credentials>/pager_token/<instance>/token``."""

    name = "pager_token"
    description = "PagerDuty user API key, to page on-call engineers"
    fields = [CredentialField("token", secret=True, description="PagerDuty user API key")]

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {"PAGERDUTY_TOKEN": values["token"]}

    def context(self, values: dict[str, str]) -> str:
        return (
            "`PAGERDUTY_TOKEN`: a PagerDuty API key; the REST API takes it as "
            "`Authorization: Token token=$PAGERDUTY_TOKEN`."
        )

    def validate(self, values: dict[str, str]) -> str:
        """Ask PagerDuty whose key this is (``GET /users/me``); ``call_service`` turns a
        refusal or an unreachable API into a clear ``CredentialInvalid``."""
        data = call_service(
            "PagerDuty",
            f"{api_url()}/users/me",
            headers={
                "Authorization": f"Token token={values['token']}",
                "Accept": "application/vnd.pagerduty+json;version=2",
            },
        )
        user = data.get("user") if isinstance(data, dict) else None
        return f"authenticated as {(user or {}).get('email', '?')}"

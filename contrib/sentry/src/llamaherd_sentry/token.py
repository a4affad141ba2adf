"""The ``sentry_token`` credential type: a Sentry auth token exported as SENTRY_AUTH_TOKEN."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from llamaherd.api import CredentialField, CredentialInvalid

DEFAULT_API_URL = "https://sentry.io/api/0"
TIMEOUT = 10.0


def api_url() -> str:
    """Sentry's API root: ``$AL_SENTRY_API_URL`` (self-hosted Sentry, tests) or sentry.io."""
    return os.environ.get("AL_SENTRY_API_URL", DEFAULT_API_URL).rstrip("/")


class SentryToken:
    """Stored at ``<credentials>/sentry_token/<instance>/token``."""

    name = "sentry_token"
    description = "Sentry auth token for sentry-cli and the Sentry API"
    fields = [CredentialField("token", secret=True, description="Sentry auth token (sntrys_...)")]

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {"SENTRY_AUTH_TOKEN": values["token"]}

    def context(self, values: dict[str, str]) -> str:
        return (
            "Sentry auth token in `SENTRY_AUTH_TOKEN`: `sentry-cli` and the Sentry API "
            f"({api_url()}) accept it as `Authorization: Bearer $SENTRY_AUTH_TOKEN`."
        )

    def validate(self, values: dict[str, str]) -> str:
        """GET the API root with the token; Sentry answers with the token's scopes."""
        base = api_url()
        request = urllib.request.Request(
            f"{base}/",
            headers={
                "Authorization": f"Bearer {values['token']}",
                "User-Agent": "llamaherd-sentry",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                data = json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise CredentialInvalid(
                    f"Sentry refused the token ({exc.code}) at {base}/"
                ) from None
            raise CredentialInvalid(f"{base}/ answered {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise CredentialInvalid(f"cannot reach {base}: {type(exc).__name__}") from None
        auth = data.get("auth") if isinstance(data, dict) else None
        if not auth:  # the root answers 200 without "auth" when no token was accepted
            raise CredentialInvalid(f"Sentry did not accept the token at {base}/")
        user = (data.get("user") or {}).get("email") or "?"
        return f"authenticated as {user}; scopes: {', '.join(auth.get('scopes', [])) or '(none)'}"

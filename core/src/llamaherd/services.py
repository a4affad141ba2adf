"""Building blocks for the credential types of web services (Slack, Linear, Sentry, X...): most
export each field under a fixed env var name and check themselves with one cheap identity call.

``ServiceCredential`` is the declarative form of such a type; ``call_service`` is the identity
call behind ``validate(values)`` (``al creds test``), with every failure turned into a
``CredentialInvalid`` that names the URL and never the credential; ``check_secret`` is the
local check of a signing secret no service API can test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaherd.errors import CredentialInvalid
from llamaherd.types import CredentialField

TIMEOUT = 10.0
MIN_SECRET = 8  # webhook signing secrets are longer: a shorter value is a paste error


class ServiceCredential:
    """A credential type whose fields are exported under fixed env var names. A subclass sets
    ``name``, ``description``, ``fields``, ``env_vars`` (field -> variable) and ``usage`` (its
    ``<credential-context>`` line); a secret only the scheduler uses (a webhook signing secret)
    sets ``sandbox = False`` and exports nothing."""

    name: str
    description: str
    fields: list[CredentialField]
    env_vars: dict[str, str] = {}
    usage = ""

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {var: values[field] for field, var in self.env_vars.items() if field in values}

    def context(self, values: dict[str, str]) -> str:
        return self.usage


def call_service(
    service: str,
    url: str,
    *,
    headers: dict[str, str],
    method: str = "GET",
    body: Any = None,
    timeout: float = TIMEOUT,
) -> Any:
    """The JSON answer of ``service``'s endpoint at ``url`` (``body``, when given, is sent as
    JSON). CredentialInvalid when the service is unreachable, refuses the credential (401, 403),
    answers another error status or no JSON."""
    import requests

    try:
        response = requests.request(
            method,
            url,
            headers={"User-Agent": "llamaherd", "Accept": "application/json", **headers},
            json=body,
            timeout=timeout,
        )
    except requests.RequestException as exc:
        raise CredentialInvalid(f"cannot reach {url}: {type(exc).__name__}") from None
    if response.status_code in (401, 403):
        raise CredentialInvalid(
            f"{service} refused the credential ({response.status_code}) at {url}"
        )
    if not response.ok:
        raise CredentialInvalid(f"{service} answered {response.status_code} at {url}")
    try:
        return response.json()
    except ValueError:
        raise CredentialInvalid(f"{service} answered without a JSON body at {url}") from None


def check_secret(service: str, value: str, minimum: int = MIN_SECRET) -> str:
    """``validate`` of a webhook signing secret, which no service lets one test online: it must
    have ``minimum`` characters or more."""
    if len(value.strip()) < minimum:
        raise CredentialInvalid(
            f"a {service} signing secret has at least {minimum} characters: copy it again "
            "from the service's settings"
        )
    return f"looks like a {service} signing secret (checked locally: no API can test it)"

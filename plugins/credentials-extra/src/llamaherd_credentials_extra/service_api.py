"""Calling a service's API to check a credential: one request, a clear CredentialInvalid.

Messages name the service and the URL (never a credential value: ``al creds test`` masks any
the service echoes) and say what the service answered.
"""

from __future__ import annotations

import os
from typing import Any

from llamaherd.api import CredentialInvalid

TIMEOUT = 10.0


def base_url(variable: str, default: str) -> str:
    """A service's API root: ``$variable`` (a proxy, a test server) or the public one."""
    return os.environ.get(variable, default).rstrip("/")


def call(method: str, url: str, **kwargs: Any) -> Any:
    """One HTTP request with ``requests``; an unreachable service is CredentialInvalid."""
    import requests

    try:
        return requests.request(method, url, timeout=TIMEOUT, **kwargs)
    except requests.RequestException as exc:
        raise CredentialInvalid(f"cannot reach {url}: {type(exc).__name__}") from None


def json_of(response: Any) -> dict[str, Any]:
    """The JSON object a response holds, or {}."""
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def explanation(response: Any) -> str:
    """The service's own words for an error, from whichever shape its body has: ``{"error":
    {"message"}}``, OAuth's ``{"error", "error_description"}``, ``{"message"}``, ``{"error":
    "..."}`` or ``{"errors": [...]}``."""
    data = json_of(response)
    error, errors = data.get("error"), data.get("errors")
    first = errors[0] if isinstance(errors, list) and errors else None
    oauth = data.get("error_description")
    for candidate in (
        error.get("message") if isinstance(error, dict) else None,
        f"{error}: {oauth}" if isinstance(error, str) and isinstance(oauth, str) else None,
        data.get("message"),
        error,
        first.get("message") if isinstance(first, dict) else first,
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()[:200]
    return str(getattr(response, "reason", "") or "").strip()


def refused(service: str, what: str, response: Any, url: str) -> CredentialInvalid:
    """``<service> refused the <what> (HTTP 401: <its words>) at <url>``."""
    words = explanation(response)
    status = f"HTTP {response.status_code}" + (f": {words}" if words else "")
    return CredentialInvalid(f"{service} refused the {what} ({status}) at {url}")


def get_json(service: str, what: str, url: str, headers: dict[str, str]) -> dict[str, Any]:
    """GET ``url``; the JSON object of a 2xx answer, else ``refused``."""
    response = call("GET", url, headers={"User-Agent": "llamaherd", **headers})
    if not response.ok:
        raise refused(service, what, response, url)
    return json_of(response)

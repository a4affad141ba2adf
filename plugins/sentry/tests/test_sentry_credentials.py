"""sentry_token and sentry_client_secret: env, context, and `al creds test` against a local
server speaking Sentry's API."""

from __future__ import annotations

import pytest
from llamaherd_sentry.credentials import SentryClientSecret, SentryToken

from llamaherd.api import CredentialInvalid
from llamaherd.plugins import registry

GOOD = "sntrys_goodTokenForTests123"


def api_root(request):
    """Sentry's ``GET /api/0/``: the token's user and scopes, or no ``auth`` without one."""
    if request["headers"].get("authorization") == f"Bearer {GOOD}":
        return 200, {
            "version": "0",
            "user": {"email": "dev@example.com"},
            "auth": {"scopes": ["project:read", "event:read"]},
        }
    if request["headers"].get("authorization", "").startswith("Bearer sntrys_revoked"):
        return 401, {"detail": "Invalid token"}
    return 200, {"version": "0", "auth": None, "user": None}


@pytest.fixture
def sentry(fake_service, monkeypatch):
    service = fake_service({("GET", "/api/0/"): api_root})
    monkeypatch.setenv("AL_SENTRY_API_URL", f"{service.url}/api/0")
    return service


def test_registered_by_the_plugin():
    owners = registry().owner
    assert owners[("credential_types", "sentry_token")] == "sentry"
    assert owners[("credential_types", "sentry_client_secret")] == "sentry"
    assert owners[("webhook_sources", "sentry")] == "sentry"


def test_env_and_context():
    assert SentryToken().env({"token": "t"}, None) == {"SENTRY_AUTH_TOKEN": "t"}
    assert "SENTRY_AUTH_TOKEN" in SentryToken().context({"token": "t"})
    assert SentryClientSecret().sandbox is False
    assert SentryClientSecret().env({"secret": "s"}, None) == {}


def test_validate_reports_user_and_scopes(sentry):
    assert (
        SentryToken().validate({"token": GOOD})
        == "authenticated as dev@example.com; scopes: project:read, event:read"
    )
    assert sentry.requests[0]["headers"]["authorization"] == f"Bearer {GOOD}"


def test_validate_refusals(sentry):
    with pytest.raises(CredentialInvalid, match=r"Sentry refused the credential \(401\)"):
        SentryToken().validate({"token": "sntrys_revoked"})
    with pytest.raises(CredentialInvalid, match="Sentry did not accept the token"):
        SentryToken().validate({"token": "sntrys_unknown"})


def test_unreachable(monkeypatch):
    monkeypatch.setenv("AL_SENTRY_API_URL", "http://127.0.0.1:9/api/0")
    with pytest.raises(CredentialInvalid, match="cannot reach http://127.0.0.1:9/api/0/"):
        SentryToken().validate({"token": GOOD})

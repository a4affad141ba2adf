"""Linear credential types: env, context, and `al creds test` against a local server speaking
Linear's GraphQL API."""

from __future__ import annotations

import pytest
from llamaherd_linear.credentials import LinearOAuth, LinearToken, LinearWebhookSecret

from llamaherd.api import CredentialInvalid
from llamaherd.plugins import registry

KEY = "lin_api_goodKeyForTests"
ACCESS = "lin_oauth_goodAccessToken"
OAUTH = {"client_id": "cid", "client_secret": "cs", "access_token": ACCESS, "refresh_token": "rt"}


def graphql(request):
    """Linear's ``POST /graphql``: 401 without a key, GraphQL errors for an unknown one."""
    auth = request["headers"].get("authorization", "")
    if not auth:
        return 401, {"errors": [{"message": "Authentication required"}]}
    if auth not in (KEY, f"Bearer {ACCESS}") or "viewer" not in request["body"]["query"]:
        return 200, {"errors": [{"message": "Invalid API key"}], "data": None}
    return 200, {"data": {"viewer": {"id": "u-1", "name": "Alice", "email": "alice@acme.dev"}}}


@pytest.fixture
def linear(fake_service, monkeypatch):
    service = fake_service({("POST", "/graphql"): graphql})
    monkeypatch.setenv("AL_LINEAR_API_URL", service.url)
    return service


def test_registered_by_the_plugin():
    owners = registry().owner
    for name in ("linear_token", "linear_oauth", "linear_webhook_secret"):
        assert owners[("credential_types", name)] == "linear"
    assert owners[("webhook_sources", "linear")] == "linear"


def test_env_names_are_action_llamas():
    assert LinearToken().env({"token": "t"}, None) == {"LINEAR_API_TOKEN": "t"}
    assert LinearOAuth().env(OAUTH, None) == {
        "LINEAR_CLIENT_ID": "cid",
        "LINEAR_CLIENT_SECRET": "cs",
        "LINEAR_ACCESS_TOKEN": ACCESS,
        "LINEAR_REFRESH_TOKEN": "rt",
    }
    assert [f.name for f in LinearOAuth().fields if not f.secret] == ["client_id"]
    assert LinearWebhookSecret().env({"secret": "s"}, None) == {}
    assert "LINEAR_API_TOKEN" in LinearToken().context({})


def test_validate_asks_who_the_key_is(linear):
    assert LinearToken().validate({"token": KEY}) == "authenticated as Alice <alice@acme.dev>"
    assert LinearOAuth().validate(OAUTH) == "authenticated as Alice <alice@acme.dev>"
    assert [r["headers"]["authorization"] for r in linear.requests] == [KEY, f"Bearer {ACCESS}"]


def test_validate_refusals(linear):
    with pytest.raises(CredentialInvalid, match="Linear did not accept the key"):
        LinearToken().validate({"token": "lin_api_revoked"})
    with pytest.raises(CredentialInvalid, match=r"Linear refused the credential \(401\)"):
        LinearToken().validate({"token": ""})


def test_webhook_secret_is_checked_locally():
    assert "checked locally" in LinearWebhookSecret().validate({"secret": "a-long-secret"})
    with pytest.raises(CredentialInvalid, match="at least 8 characters"):
        LinearWebhookSecret().validate({"secret": "short"})

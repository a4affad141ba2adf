"""X credential types: env names as Action Llama's, and `al creds test` against a local server
speaking X API v2."""

from __future__ import annotations

import pytest
from llamaherd_twitter.credentials import XTwitterApi, XTwitterUserOAuth1, XTwitterUserOAuth2

from llamaherd.api import CredentialInvalid
from llamaherd.plugins import registry

BEARER = "AAAA-app-bearer"
ACCESS = "user-access-token"
API = {"consumer_key": "ck", "consumer_secret": "cs", "bearer_token": BEARER}
OAUTH2 = {"client_id": "ci", "client_secret": "cs", "access_token": ACCESS, "refresh_token": "rt"}


def bearer(token):
    def route(request):
        if request["headers"].get("authorization") == f"Bearer {token}":
            return 200, {"data": {"id": "2244994945", "name": "Bot", "username": "herdbot"}}
        return 401, {"title": "Unauthorized", "type": "about:blank", "status": 401}

    return route


@pytest.fixture
def x(fake_service, monkeypatch):
    service = fake_service(
        {
            ("GET", "/2/tweets/search/recent"): bearer(BEARER),
            ("GET", "/2/users/me"): bearer(ACCESS),
        }
    )
    monkeypatch.setenv("AL_X_API_URL", service.url)
    return service


def test_registered_by_the_plugin():
    owners = registry().owner
    for name in ("x_twitter_api", "x_twitter_user_oauth1", "x_twitter_user_oauth2"):
        assert owners[("credential_types", name)] == "twitter"
    assert owners[("webhook_sources", "twitter")] == "twitter"


def test_env_names_are_action_llamas():
    assert XTwitterApi().env(API, None) == {
        "X_CONSUMER_KEY": "ck",
        "X_CONSUMER_SECRET": "cs",
        "X_BEARER_TOKEN": BEARER,
    }
    assert XTwitterUserOAuth1().env({"access_token": "a", "access_token_secret": "s"}, None) == {
        "X_ACCESS_TOKEN": "a",
        "X_ACCESS_TOKEN_SECRET": "s",
    }
    assert set(XTwitterUserOAuth2().env(OAUTH2, None)) == {
        "X_OAUTH2_CLIENT_ID",
        "X_OAUTH2_CLIENT_SECRET",
        "X_OAUTH2_ACCESS_TOKEN",
        "X_OAUTH2_REFRESH_TOKEN",
    }


def test_validate(x):
    assert "accepted" in XTwitterApi().validate(API)
    assert x.requests[0]["query"] == {"query": "test", "max_results": "10"}
    assert XTwitterUserOAuth2().validate(OAUTH2) == "authenticated as @herdbot"
    with pytest.raises(CredentialInvalid, match=r"X refused the credential \(401\)"):
        XTwitterApi().validate({**API, "bearer_token": "revoked"})
    with pytest.raises(CredentialInvalid, match=r"X refused the credential \(401\)"):
        XTwitterUserOAuth2().validate({**OAUTH2, "access_token": "revoked"})

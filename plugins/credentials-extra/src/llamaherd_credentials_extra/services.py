"""Token credential types of web services: each field exported as one environment variable
(Action Llama's ``envVars``), with an online check against the service's identity endpoint.

| type | fields | check (``al creds test``) | base URL variable |
|---|---|---|---|
| bugsnag_token | token | ``GET /user`` (``Authorization: token``) | AL_BUGSNAG_API_URL |
| cloudflare_api_token | api_token | ``GET /user/tokens/verify``, else ``GET /zones`` | AL_CLOUDFLARE_API_URL |
| hetzner_api_key | api_key | ``GET /server_types`` | AL_HETZNER_API_URL |
| netlify_token | token | ``GET /user`` | AL_NETLIFY_API_URL |
| vultr_api_key | api_key | ``GET /account`` | AL_VULTR_API_URL |
| reddit_oauth | client_id, client_secret, username, password, user_agent | password grant at ``POST /api/v1/access_token`` | AL_REDDIT_API_URL |
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaherd.api import CredentialField, CredentialInvalid
from llamaherd_credentials_extra.service_api import base_url, call, get_json, json_of, refused


class EnvCredential:
    """A credential type whose fields map one to one onto env vars; ``context`` is fixed text
    naming those variables (never a value)."""

    name: str
    description: str
    fields: list[CredentialField]
    env_vars: dict[str, str]  # field -> env var
    context_text: str

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {var: values[field] for field, var in self.env_vars.items() if values.get(field)}

    def context(self, values: dict[str, str]) -> str:
        return self.context_text


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class BugsnagToken(EnvCredential):
    name = "bugsnag_token"
    description = "Bugsnag personal auth token, for error monitoring and release management"
    fields = [CredentialField("token", secret=True, description="Bugsnag auth token")]
    env_vars = {"token": "BUGSNAG_AUTH_TOKEN"}
    context_text = (
        "Bugsnag auth token in `BUGSNAG_AUTH_TOKEN`: send it to the Bugsnag Data Access API "
        "(https://api.bugsnag.com) as `Authorization: token $BUGSNAG_AUTH_TOKEN` with "
        "`X-Version: 2`."
    )

    def validate(self, values: dict[str, str]) -> str:
        url = base_url("AL_BUGSNAG_API_URL", "https://api.bugsnag.com") + "/user"
        headers = {"Authorization": f"token {values['token']}", "X-Version": "2"}
        user = get_json("Bugsnag", "token", url, headers)
        return f"authenticated as {user.get('email') or user.get('name') or '?'}"


class NetlifyToken(EnvCredential):
    name = "netlify_token"
    description = "Netlify personal access token, for managing sites and deploys"
    fields = [CredentialField("token", secret=True, description="Netlify personal access token")]
    env_vars = {"token": "NETLIFY_AUTH_TOKEN"}
    context_text = (
        "Netlify personal access token in `NETLIFY_AUTH_TOKEN`: the `netlify` CLI reads it; "
        "for the API (https://api.netlify.com/api/v1) send `Authorization: Bearer "
        "$NETLIFY_AUTH_TOKEN`."
    )

    def validate(self, values: dict[str, str]) -> str:
        url = base_url("AL_NETLIFY_API_URL", "https://api.netlify.com/api/v1") + "/user"
        user = get_json("Netlify", "token", url, _bearer(values["token"]))
        return f"authenticated as {user.get('email') or user.get('full_name') or '?'}"


class CloudflareApiToken(EnvCredential):
    name = "cloudflare_api_token"
    description = "Cloudflare API token (DNS and Origin CA management)"
    fields = [
        CredentialField(
            "api_token",
            secret=True,
            description="Cloudflare API token with Zone:DNS:Edit and Zone:SSL:Edit permissions",
        )
    ]
    env_vars = {"api_token": "CLOUDFLARE_API_TOKEN"}
    context_text = (
        "Cloudflare API token in `CLOUDFLARE_API_TOKEN` (wrangler and the Cloudflare API at "
        "https://api.cloudflare.com/client/v4 accept it as a Bearer token); meant for "
        "provisioning, rarely needed by an agent."
    )

    def validate(self, values: dict[str, str]) -> str:
        """A user token verifies itself; an account token cannot, so listing zones stands in."""
        base = base_url("AL_CLOUDFLARE_API_URL", "https://api.cloudflare.com/client/v4")
        headers = {"User-Agent": "llamaherd", **_bearer(values["api_token"])}
        verify = call("GET", f"{base}/user/tokens/verify", headers=headers)
        result = json_of(verify).get("result")
        if verify.ok and isinstance(result, dict):
            status = result.get("status")
            if status != "active":
                raise CredentialInvalid(f"Cloudflare says the token is {status or 'not active'}")
            return f"token {result.get('id', '?')} is active"
        url = f"{base}/zones?per_page=1"
        zones = call("GET", url, headers=headers)
        if not zones.ok or json_of(zones).get("success") is not True:
            raise refused("Cloudflare", "token", zones, url)
        return "account token accepted (it can list zones)"


class HetznerApiKey(EnvCredential):
    name = "hetzner_api_key"
    description = "Hetzner Cloud API token, for VPS provisioning"
    fields = [CredentialField("api_key", secret=True, description="Hetzner Cloud API token")]
    env_vars = {"api_key": "HETZNER_API_KEY"}
    context_text = (
        "Hetzner Cloud API token in `HETZNER_API_KEY` (the API at https://api.hetzner.cloud/v1 "
        "takes it as a Bearer token; `hcloud` reads `HCLOUD_TOKEN`, so pass it on); meant for "
        "provisioning, rarely needed by an agent."
    )

    def validate(self, values: dict[str, str]) -> str:
        url = base_url("AL_HETZNER_API_URL", "https://api.hetzner.cloud/v1") + "/server_types"
        data = get_json("Hetzner Cloud", "API token", url, _bearer(values["api_key"]))
        count = len(data.get("server_types") or [])
        return f"accepted by the Hetzner Cloud API ({count} server types visible)"


class VultrApiKey(EnvCredential):
    name = "vultr_api_key"
    description = "Vultr API key, for VPS provisioning"
    fields = [CredentialField("api_key", secret=True, description="Vultr API key")]
    env_vars = {"api_key": "VULTR_API_KEY"}
    context_text = (
        "Vultr API key in `VULTR_API_KEY` (vultr-cli reads it; the API at "
        "https://api.vultr.com/v2 takes it as a Bearer token); meant for provisioning, rarely "
        "needed by an agent."
    )

    def validate(self, values: dict[str, str]) -> str:
        url = base_url("AL_VULTR_API_URL", "https://api.vultr.com/v2") + "/account"
        account = get_json("Vultr", "API key", url, _bearer(values["api_key"])).get("account")
        who = account.get("email") or account.get("name") if isinstance(account, dict) else None
        return f"authenticated as {who or '?'}"


class RedditOAuth(EnvCredential):
    name = "reddit_oauth"
    description = "Reddit script-app OAuth2 credentials of a bot account (posting, moderation)"
    fields = [
        CredentialField(
            "client_id", secret=False, description="app id from Reddit preferences > apps (script)"
        ),
        CredentialField("client_secret", secret=True, description="the script app's secret"),
        CredentialField("username", secret=False, description="the bot account's username"),
        CredentialField("password", secret=True, description="the bot account's password"),
        CredentialField(
            "user_agent",
            secret=False,
            description="user agent, e.g. script:mybot:v1.0 (by u/yourname)",
        ),
    ]
    env_vars = {
        "client_id": "REDDIT_CLIENT_ID",
        "client_secret": "REDDIT_CLIENT_SECRET",
        "username": "REDDIT_USERNAME",
        "password": "REDDIT_PASSWORD",
        "user_agent": "REDDIT_USER_AGENT",
    }

    def context(self, values: dict[str, str]) -> str:
        who = f" for u/{values['username']}" if values.get("username") else ""
        return (
            f"Reddit script-app credentials{who} in `REDDIT_CLIENT_ID`, `REDDIT_CLIENT_SECRET`, "
            "`REDDIT_USERNAME`, `REDDIT_PASSWORD`, `REDDIT_USER_AGENT`: get an access token with "
            "`POST https://www.reddit.com/api/v1/access_token` (HTTP Basic auth with the client "
            "id and secret, form `grant_type=password&username=...&password=...`, your user "
            "agent), then call https://oauth.reddit.com with `Authorization: bearer <token>`."
        )

    def validate(self, values: dict[str, str]) -> str:
        """The password grant a script app uses: a token means all five fields are right."""
        url = base_url("AL_REDDIT_API_URL", "https://www.reddit.com") + "/api/v1/access_token"
        response = call(
            "POST",
            url,
            auth=(values["client_id"], values["client_secret"]),
            headers={"User-Agent": values["user_agent"]},
            data={
                "grant_type": "password",
                "username": values["username"],
                "password": values["password"],
            },
        )
        if response.status_code == 401:
            raise refused("Reddit", "client id or secret", response, url)
        if not response.ok:
            raise refused("Reddit", "credentials", response, url)
        data = json_of(response)
        if "error" in data or not data.get("access_token"):
            # Reddit answers a wrong username or password with 200 and an error field.
            reason = data.get("error") or "no access token in the reply"
            raise CredentialInvalid(f"Reddit refused the username or password ({reason}) at {url}")
        return f"token granted for u/{values['username']} (scope {data.get('scope', '?')})"


SERVICE_TYPES: list[Any] = [
    BugsnagToken(),
    CloudflareApiToken(),
    HetznerApiKey(),
    NetlifyToken(),
    RedditOAuth(),
    VultrApiKey(),
]

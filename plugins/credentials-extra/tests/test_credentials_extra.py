"""The credential types of llamaherd-credentials-extra: Action Llama's names, fields and env
vars; `al creds add/test/types` for them; each online check against a stand-in of its service
speaking that service's wire format over real HTTP."""

from __future__ import annotations

import base64
import json
import stat
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from llamaherd_credentials_extra.gcp import GcpServiceAccount
from llamaherd_credentials_extra.services import SERVICE_TYPES
from llamaherd_credentials_extra.ssh import VpsSsh

from llamaherd.api import CredentialInvalid, CredentialStore, credential_files
from llamaherd.testing import require_service

TYPES = {t.name: t for t in [*SERVICE_TYPES, GcpServiceAccount(), VpsSsh()]}

# Action Llama 0.29.1's definitions (dist/credentials/builtins/*.js): field -> (secret, env var).
PEER = {
    "bugsnag_token": {"token": (True, "BUGSNAG_AUTH_TOKEN")},
    "cloudflare_api_token": {"api_token": (True, "CLOUDFLARE_API_TOKEN")},
    "gcp_service_account": {"key_json": (True, "GOOGLE_APPLICATION_CREDENTIALS_JSON")},
    "hetzner_api_key": {"api_key": (True, "HETZNER_API_KEY")},
    "netlify_token": {"token": (True, "NETLIFY_AUTH_TOKEN")},
    "reddit_oauth": {
        "client_id": (False, "REDDIT_CLIENT_ID"),
        "client_secret": (True, "REDDIT_CLIENT_SECRET"),
        "username": (False, "REDDIT_USERNAME"),
        "password": (True, "REDDIT_PASSWORD"),
        "user_agent": (False, "REDDIT_USER_AGENT"),
    },
    "vultr_api_key": {"api_key": (True, "VULTR_API_KEY")},
    "vps_ssh": {"private_key": (True, None), "public_key": (False, None)},
}
# What we export beyond the peer: the path Google's tools look for.
EXTRA_ENV = {"gcp_service_account": {"GOOGLE_APPLICATION_CREDENTIALS"}}


def sample_values(name: str) -> dict[str, str]:
    return {field: f"<{name}.{field}-VALUE>" for field in PEER[name]}


# --------------------------------------------------------------------------- definitions


@pytest.mark.parametrize("name", sorted(PEER))
def test_names_fields_and_env_vars_are_action_llamas(name):
    ctype = TYPES[name]
    assert [(f.name, f.secret) for f in ctype.fields] == [
        (field, secret) for field, (secret, _) in PEER[name].items()
    ]
    values = sample_values(name)
    env = ctype.env(values, Path("/credentials") / name / "default")
    expected = {var: values[field] for field, (_, var) in PEER[name].items() if var}
    assert {k: v for k, v in env.items() if k not in EXTRA_ENV.get(name, set())} == expected


@pytest.mark.parametrize("name", sorted(PEER))
def test_context_names_the_variables_never_a_secret(name):
    ctype = TYPES[name]
    values = sample_values(name)
    text = ctype.context(values)
    assert text and "\n" not in text
    for field, (secret, var) in PEER[name].items():
        if var:
            assert f"`{var}`" in text
        if secret:
            assert values[field] not in text
    assert ctype.context({f.name: "" for f in ctype.fields})  # works before anything is stored


def test_the_installed_plugin_registers_every_type():
    from llamaherd.plugins import registry

    reg = registry()
    for name in PEER:
        assert reg.owner[("credential_types", name)] == "credentials-extra"


def test_staged_files_keep_ssh_happy_and_point_google_tools_at_the_key(tmp_path):
    files = credential_files(TYPES, {"vps_ssh/prod": sample_values("vps_ssh")})
    assert {f.path: f.mode for f in files} == {
        "vps_ssh/prod/private_key": 0o600,
        "vps_ssh/prod/public_key": 0o400,
    }
    env = TYPES["gcp_service_account"].env({"key_json": "{}"}, Path("/credentials/gcp/x"))
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/credentials/gcp/x/key_json"


# --------------------------------------------------------------------------- token services


def bearer(good: str, body: dict, refusal: tuple[int, dict]):
    def answer(request):
        return (
            (200, body) if request["headers"].get("authorization") == f"Bearer {good}" else refusal
        )

    return answer


def test_bugsnag(service, monkeypatch):
    monkeypatch.setenv("AL_BUGSNAG_API_URL", service.url)

    def user(request):
        headers = request["headers"]
        if headers.get("authorization") == "token good" and headers.get("x-version") == "2":
            return 200, {"id": "u1", "name": "Ada", "email": "ada@example.com"}
        return 401, {"errors": ["Invalid authentication token"]}

    service.route("GET", "/user", user)
    assert TYPES["bugsnag_token"].validate({"token": "good"}) == "authenticated as ada@example.com"
    with pytest.raises(CredentialInvalid) as err:
        TYPES["bugsnag_token"].validate({"token": "bad"})
    assert str(err.value) == (
        f"Bugsnag refused the token (HTTP 401: Invalid authentication token) at {service.url}/user"
    )


def test_netlify(service, monkeypatch):
    monkeypatch.setenv("AL_NETLIFY_API_URL", service.url + "/api/v1/")
    refusal = (401, {"code": 401, "message": "Access Denied: your token is invalid"})
    user = {"id": "5f", "email": "ops@example.com", "full_name": "Ops"}
    service.route("GET", "/api/v1/user", bearer("nfp_good", user, refusal))
    assert (
        TYPES["netlify_token"].validate({"token": "nfp_good"}) == "authenticated as ops@example.com"
    )
    with pytest.raises(
        CredentialInvalid, match=r"Netlify refused the token \(HTTP 401: Access Denied"
    ):
        TYPES["netlify_token"].validate({"token": "nfp_bad"})


def test_hetzner(service, monkeypatch):
    monkeypatch.setenv("AL_HETZNER_API_URL", service.url + "/v1")
    types = {"server_types": [{"id": 1, "name": "cx22"}, {"id": 2, "name": "cx32"}], "meta": {}}
    refusal = (401, {"error": {"code": "unauthorized", "message": "unable to authenticate"}})
    service.route("GET", "/v1/server_types", bearer("hk", types, refusal))
    assert "2 server types visible" in TYPES["hetzner_api_key"].validate({"api_key": "hk"})
    with pytest.raises(CredentialInvalid, match="unable to authenticate"):
        TYPES["hetzner_api_key"].validate({"api_key": "nope"})


def test_vultr(service, monkeypatch):
    monkeypatch.setenv("AL_VULTR_API_URL", service.url + "/v2")
    account = {"account": {"name": "Ops", "email": "ops@example.com", "balance": -5.0, "acls": []}}
    refusal = (401, {"error": "Invalid API token.", "status": 401})
    service.route("GET", "/v2/account", bearer("VK", account, refusal))
    assert TYPES["vultr_api_key"].validate({"api_key": "VK"}) == "authenticated as ops@example.com"
    with pytest.raises(
        CredentialInvalid, match=r"Vultr refused the API key \(HTTP 401: Invalid API token.\)"
    ):
        TYPES["vultr_api_key"].validate({"api_key": "nope"})


CF_INVALID = (
    401,
    {
        "success": False,
        "errors": [{"code": 1000, "message": "Invalid API Token"}],
        "messages": [],
        "result": None,
    },
)


def cf_verify(request):
    tokens = {"Bearer user-token": "active", "Bearer off-token": "disabled"}
    status = tokens.get(request["headers"].get("authorization"))
    if status is None:
        return CF_INVALID
    result = {"id": "ed17574386854bf78a67040be0a770b0", "status": status}
    return 200, {"success": True, "errors": [], "messages": [], "result": result}


def cf_zones(request):
    if request["headers"].get("authorization") == "Bearer account-token":
        return 200, {"success": True, "errors": [], "result": [{"id": "z1", "name": "example.com"}]}
    return CF_INVALID


def test_cloudflare_user_and_account_tokens(service, monkeypatch):
    monkeypatch.setenv("AL_CLOUDFLARE_API_URL", service.url + "/client/v4")
    service.route("GET", "/client/v4/user/tokens/verify", cf_verify)
    service.route("GET", "/client/v4/zones?per_page=1", cf_zones)
    check = TYPES["cloudflare_api_token"].validate
    assert check({"api_token": "user-token"}) == "token ed17574386854bf78a67040be0a770b0 is active"
    assert check({"api_token": "account-token"}) == "account token accepted (it can list zones)"
    with pytest.raises(CredentialInvalid, match="Cloudflare says the token is disabled"):
        check({"api_token": "off-token"})
    with pytest.raises(
        CredentialInvalid, match=r"refused the token \(HTTP 401: Invalid API Token\)"
    ):
        check({"api_token": "wrong"})


REDDIT = {
    "client_id": "p-jcoLKBynTLew",
    "client_secret": "gko_LXELoV07ZBNUXrvWZfzE3aI",
    "username": "mybot",
    "password": "hunter2-long",
    "user_agent": "script:mybot:v1.0 (by u/me)",
}


def reddit_token(request):
    """Reddit's script-app password grant (RFC 6749 4.3 with HTTP Basic client auth)."""
    basic = base64.b64encode(f"{REDDIT['client_id']}:{REDDIT['client_secret']}".encode()).decode()
    if request["headers"].get("authorization") != f"Basic {basic}":
        return 401, {"message": "Unauthorized", "error": 401}
    assert request["headers"]["user-agent"] == REDDIT["user_agent"]
    form = {k: v[0] for k, v in parse_qs(request["body"].decode()).items()}
    if form != {"grant_type": "password", "username": "mybot", "password": REDDIT["password"]}:
        return 200, {"error": "invalid_grant"}
    return 200, {
        "access_token": "eyJhbGciOi",
        "token_type": "bearer",
        "expires_in": 86400,
        "scope": "*",
    }


def test_reddit_password_grant(service, monkeypatch):
    monkeypatch.setenv("AL_REDDIT_API_URL", service.url)
    service.route("POST", "/api/v1/access_token", reddit_token)
    check = TYPES["reddit_oauth"].validate
    assert check(REDDIT) == "token granted for u/mybot (scope *)"
    with pytest.raises(
        CredentialInvalid, match=r"refused the username or password \(invalid_grant\)"
    ):
        check({**REDDIT, "password": "wrong"})
    with pytest.raises(
        CredentialInvalid, match=r"Reddit refused the client id or secret \(HTTP 401"
    ):
        check({**REDDIT, "client_secret": "wrong"})


def test_an_unreachable_service_is_a_clear_failure(monkeypatch):
    monkeypatch.setenv("AL_NETLIFY_API_URL", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(
        CredentialInvalid, match=r"cannot reach http://127.0.0.1:9/user: ConnectionError"
    ):
        TYPES["netlify_token"].validate({"token": "x"})


# --------------------------------------------------------------------------- gcp_service_account


def rsa_key_pair():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return pem, key.public_key()


def key_json(pem: str, **overrides) -> str:
    key = {
        "type": "service_account",
        "project_id": "herd-prod",
        "private_key_id": "0123abcd",
        "private_key": pem,
        "client_email": "agent@herd-prod.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    key.update(overrides)
    return json.dumps(key)


def b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def google_token_endpoint(public_key, audience: str):
    """Google's OAuth 2.0 server for service accounts: a JWT-bearer grant, checked as Google
    does (RS256 signature by the account's key, aud, iss, a one-hour lifetime)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    def answer(request):
        form = {k: v[0] for k, v in parse_qs(request["body"].decode()).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return 400, {
                "error": "unsupported_grant_type",
                "error_description": "Invalid grant_type",
            }
        header, claims, signature = form["assertion"].split(".")
        try:
            public_key.verify(
                b64decode(signature),
                f"{header}.{claims}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        head, body = json.loads(b64decode(header)), json.loads(b64decode(claims))
        assert head == {"alg": "RS256", "typ": "JWT", "kid": "0123abcd"}
        assert body["aud"] == audience and body["iss"].endswith(".iam.gserviceaccount.com")
        assert body["exp"] - body["iat"] == 3600 and abs(body["iat"] - time.time()) < 60
        return 200, {"access_token": "ya29.c.b0Aaek", "expires_in": 3599, "token_type": "Bearer"}

    return answer


def test_gcp_key_is_exchanged_for_a_token(service, monkeypatch):
    pem, public = rsa_key_pair()
    monkeypatch.setenv("AL_GCP_TOKEN_URL", service.url + "/token")
    service.route("POST", "/token", google_token_endpoint(public, service.url + "/token"))
    check = TYPES["gcp_service_account"].validate
    assert check({"key_json": key_json(pem)}) == (
        "authenticated as agent@herd-prod.iam.gserviceaccount.com (project herd-prod)"
    )
    other_pem, _ = rsa_key_pair()  # a key Google does not know for this account
    with pytest.raises(CredentialInvalid, match=r"HTTP 400: invalid_grant: Invalid JWT Signature"):
        check({"key_json": key_json(other_pem)})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-----BEGIN PRIVATE KEY-----", "key_json is not JSON"),
        (json.dumps({"type": "authorized_user"}), "not a service-account key"),
        (
            json.dumps({"type": "service_account", "client_email": "a@b"}),
            "lacks private_key, project_id",
        ),
    ],
)
def test_gcp_key_shape_is_checked_before_any_request(text, message):
    with pytest.raises(CredentialInvalid, match=message):
        TYPES["gcp_service_account"].validate({"key_json": text})


def test_gcp_context_names_the_account():
    pem, _ = rsa_key_pair()
    text = TYPES["gcp_service_account"].context({"key_json": key_json(pem)})
    assert "agent@herd-prod.iam.gserviceaccount.com (project herd-prod)" in text
    assert "PRIVATE KEY" not in text


# --------------------------------------------------------------------------- vps_ssh


@pytest.fixture
def keygen(tmp_path):
    require_service("ssh_client")

    def make(name: str, *args: str) -> tuple[str, str, str]:
        path = tmp_path / name
        subprocess.run(
            ["ssh-keygen", "-q", "-C", "vps", "-f", str(path), *args], check=True, timeout=60
        )
        listed = subprocess.run(
            ["ssh-keygen", "-lf", str(path)], capture_output=True, text=True, check=True
        )
        return path.read_text(), (tmp_path / f"{name}.pub").read_text(), listed.stdout.split()[1]

    return make


@pytest.mark.parametrize("kind", [("-t", "ed25519"), ("-t", "rsa", "-b", "2048", "-m", "PEM")])
def test_vps_ssh_pair_is_checked_offline(keygen, kind):
    private, public, fingerprint = keygen("k", *kind, "-N", "")
    detail = TYPES["vps_ssh"].validate({"private_key": private, "public_key": public})
    assert detail.startswith("key pair matches (") and fingerprint in detail


def test_vps_ssh_problems(keygen):
    private, _, _ = keygen("a", "-t", "ed25519", "-N", "")
    _, other_public, _ = keygen("b", "-t", "ed25519", "-N", "")
    locked, locked_public, _ = keygen("c", "-t", "ed25519", "-N", "a passphrase")
    check = TYPES["vps_ssh"].validate
    with pytest.raises(CredentialInvalid, match="public_key does not belong to private_key"):
        check({"private_key": private, "public_key": other_public})
    with pytest.raises(CredentialInvalid, match="private_key is encrypted"):
        check({"private_key": locked, "public_key": locked_public})
    with pytest.raises(CredentialInvalid, match="not an SSH private key"):
        check({"private_key": private.splitlines()[0], "public_key": other_public})


# --------------------------------------------------------------------------- the real CLI


def test_cli_add_by_prompts_then_test_and_types(al, service, tmp_path):
    service.route("POST", "/api/v1/access_token", reddit_token)
    env = {"AL_REDDIT_API_URL": service.url, "AL_LOAD_PLUGINS": "credentials-extra"}
    answers = "".join(REDDIT[f] + "\n" for f in PEER["reddit_oauth"])
    added = al("creds", "add", "reddit_oauth:bot", env=env, input=answers)
    assert added.returncode == 0, added.stderr
    shown = added.stdout + added.stderr  # hidden prompts go to the terminal, here stderr
    for field in ("client_id (", "client_secret (", "username (", "password (", "user_agent ("):
        assert field in shown  # one prompt per field, with its description
    for secret in (REDDIT["client_secret"], REDDIT["password"]):
        assert secret not in added.stdout + added.stderr
    stored = tmp_path / "credentials" / "reddit_oauth" / "bot"
    assert (stored / "password").read_text() == REDDIT["password"] + "\n"
    assert stat.S_IMODE((stored / "password").stat().st_mode) == 0o600

    ok = al("creds", "test", "reddit_oauth:bot", env=env)
    assert (ok.returncode, ok.stdout) == (
        0,
        "ok: reddit_oauth:bot: token granted for u/mybot (scope *)\n",
    )

    CredentialStore(tmp_path / "credentials").write(
        "reddit_oauth", "old", {**REDDIT, "password": "stale-pass-99"}
    )
    refused = al("creds", "test", "reddit_oauth:old", env=env)
    assert refused.returncode == 1
    assert "refused the username or password (invalid_grant)" in refused.stderr
    assert "stale-pass-99" not in refused.stdout + refused.stderr

    listed = al("creds", "types", "--json", env=env)
    rows = {row["type"]: row for row in json.loads(listed.stdout)}
    assert set(PEER) <= set(rows)
    assert all(rows[name]["plugin"] == "credentials-extra" for name in PEER)
    assert rows["reddit_oauth"]["env"] == sorted(v for _, v in PEER["reddit_oauth"].values())
    assert rows["vps_ssh"]["env"] == [] and rows["vps_ssh"]["staged"] is True
    assert all(rows[name]["validates"] for name in PEER)


def test_prompt_credential_context(al, tmp_project, tmp_path):
    tmp_project.config('[models.m]\nprovider = "scripted"\nmodel = "scripted"\n')
    tmp_project.add_agent(
        "ops",
        'models = ["m"]\ncredentials = ["netlify_token", "reddit_oauth:bot", "vps_ssh"]\n'
        '[runtime]\ntype = "host-user"\n',
    )
    store = CredentialStore(tmp_path / "credentials")
    store.write("netlify_token", "default", {"token": "nfp_SECRET_VALUE_1"})
    store.write("reddit_oauth", "bot", REDDIT)
    result = al("prompt", "ops", cwd=tmp_project.root)
    assert result.returncode == 0, result.stderr
    assert (
        "- netlify_token (default): files in $AL_CREDENTIALS_PATH/netlify_token/default/; env NETLIFY_AUTH_TOKEN"
        in result.stdout
    )
    assert "Reddit script-app credentials for u/mybot" in result.stdout
    assert "- vps_ssh (default): files in $AL_CREDENTIALS_PATH/vps_ssh/default/" in result.stdout
    for secret in ("nfp_SECRET_VALUE_1", REDDIT["password"], REDDIT["client_secret"]):
        assert secret not in result.stdout

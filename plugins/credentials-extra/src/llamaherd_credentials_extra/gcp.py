"""``gcp_service_account``: a Google Cloud service-account JSON key.

In a run the key's JSON is in ``GOOGLE_APPLICATION_CREDENTIALS_JSON`` (Action Llama's
variable) and, so that gcloud and Google's client libraries find it without help,
``GOOGLE_APPLICATION_CREDENTIALS`` names the staged file.

``al creds test`` does what those libraries do first: it signs a JWT with the key (RS256) and
exchanges it for an access token at Google's OAuth token endpoint (``$AL_GCP_TOKEN_URL``
overrides it). A token means the key is well-formed, not revoked and its account enabled.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from llamaherd.api import CredentialField, CredentialInvalid
from llamaherd_credentials_extra.service_api import base_url, call, json_of, refused

TOKEN_URL = "https://oauth2.googleapis.com/token"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
REQUIRED = ("private_key", "client_email", "project_id")


def parse_key(text: str) -> dict[str, Any]:
    """The key file's JSON object, checked for what a service-account key must have."""
    try:
        key = json.loads(text)
    except ValueError:
        raise CredentialInvalid(
            "key_json is not JSON: store the whole key file (al creds add "
            "gcp_service_account --file key_json=KEY.json)"
        ) from None
    if not isinstance(key, dict) or key.get("type") != "service_account":
        raise CredentialInvalid(
            'key_json is not a service-account key ("type" must be "service_account")'
        )
    missing = [name for name in REQUIRED if not key.get(name)]
    if missing:
        raise CredentialInvalid(f"key_json lacks {', '.join(missing)}")
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed_assertion(key: dict[str, Any], audience: str, now: float) -> str:
    """The RS256-signed JWT a service account presents to the token endpoint."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    try:
        private_key = serialization.load_pem_private_key(key["private_key"].encode(), None)
    except (ValueError, TypeError):
        raise CredentialInvalid("key_json's private_key is not an unencrypted PEM key") from None
    if not isinstance(private_key, rsa.RSAPrivateKey):
        raise CredentialInvalid("key_json's private_key is not an RSA key")
    header = {"alg": "RS256", "typ": "JWT"}
    if key.get("private_key_id"):
        header["kid"] = key["private_key_id"]
    claims = {
        "iss": key["client_email"],
        "scope": SCOPE,
        "aud": audience,
        "iat": int(now),
        "exp": int(now) + 3600,
    }
    signing_input = ".".join(_b64(json.dumps(part).encode()) for part in (header, claims))
    signature = private_key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


class GcpServiceAccount:
    name = "gcp_service_account"
    description = "Google Cloud service-account JSON key"
    fields = [
        CredentialField(
            "key_json",
            secret=True,
            description="the whole service-account key file (use --file key_json=KEY.json)",
        )
    ]

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {
            "GOOGLE_APPLICATION_CREDENTIALS_JSON": values["key_json"],
            "GOOGLE_APPLICATION_CREDENTIALS": str(Path(path) / "key_json"),
        }

    def context(self, values: dict[str, str]) -> str:
        try:
            key = json.loads(values.get("key_json") or "{}")
        except ValueError:
            key = {}
        who = ""
        if isinstance(key, dict) and key.get("client_email"):
            who = f" for {key['client_email']} (project {key.get('project_id', '?')})"
        return (
            f"Google Cloud service-account key{who}: the JSON in "
            "`GOOGLE_APPLICATION_CREDENTIALS_JSON`, the file in `GOOGLE_APPLICATION_CREDENTIALS` "
            "(gcloud: `gcloud auth activate-service-account --key-file "
            '"$GOOGLE_APPLICATION_CREDENTIALS"`; client libraries find it themselves).'
        )

    def validate(self, values: dict[str, str]) -> str:
        key = parse_key(values["key_json"])
        url = base_url("AL_GCP_TOKEN_URL", TOKEN_URL)
        assertion = signed_assertion(key, url, time.time())
        response = call(
            "POST",
            url,
            data={"grant_type": JWT_BEARER, "assertion": assertion},
            headers={"User-Agent": "llamaherd"},
        )
        if not response.ok or not json_of(response).get("access_token"):
            raise refused("Google", "service-account key", response, url)
        return f"authenticated as {key['client_email']} (project {key['project_id']})"

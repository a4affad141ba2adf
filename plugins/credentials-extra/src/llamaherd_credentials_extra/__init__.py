"""llamaherd-credentials-extra: the credential types of Action Llama that no service plugin of
llamaherd owns, with the same names, fields and environment variables, so existing stores and
agent configs work as they are:

- ``bugsnag_token`` (``BUGSNAG_AUTH_TOKEN``), ``netlify_token`` (``NETLIFY_AUTH_TOKEN``),
  ``cloudflare_api_token`` (``CLOUDFLARE_API_TOKEN``), ``hetzner_api_key``
  (``HETZNER_API_KEY``), ``vultr_api_key`` (``VULTR_API_KEY``), ``reddit_oauth``
  (``REDDIT_CLIENT_ID`` ... ``REDDIT_USER_AGENT``): ``services.py``;
- ``gcp_service_account`` (``GOOGLE_APPLICATION_CREDENTIALS_JSON``): ``gcp.py``;
- ``vps_ssh`` (a key pair, staged as files only): ``ssh.py``;
- ``gateway_api_key`` (a bearer for the control API, never staged): ``gateway.py``.

``al creds test`` calls each service's cheapest identity endpoint; every base URL can be
pointed elsewhere with an ``AL_<SERVICE>_API_URL`` variable (a proxy, a test server).
Model-key types (``custom_key`` included) belong to the provider plugins.
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register: Any) -> None:
    # Imported here, not at the top: `al --help` loads every plugin.
    from llamaherd_credentials_extra.gateway import GatewayApiKey
    from llamaherd_credentials_extra.gcp import GcpServiceAccount
    from llamaherd_credentials_extra.services import SERVICE_TYPES
    from llamaherd_credentials_extra.ssh import VpsSsh

    for credential_type in (*SERVICE_TYPES, GcpServiceAccount(), VpsSsh(), GatewayApiKey()):
        register(credential_type)

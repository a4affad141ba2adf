"""The Action Llama compatibility corpus: projects written from Action Llama 0.29.1's reference
docs and type definitions (``projects/<name>/``), each copied into a temporary directory with a
credential store holding (dummy) values for every credential they reference.

Each project says in its files where it comes from. They must validate with exit 0 and
assemble their prompts unchanged; only the run test swaps the model provider (offline).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import require_service

CORPUS = Path(__file__).parent / "projects"
PROJECTS = sorted(p.name for p in CORPUS.iterdir() if (p / "agents").is_dir())

# Every credential the corpus references: "type:instance" -> fields.
CREDENTIALS: dict[str, dict[str, str]] = {
    **{
        f"{kind}:default": {"token": f"{kind}-not-a-real-key"}
        for kind in (
            "anthropic_key",
            "openai_key",
            "groq_key",
            "google_key",
            "xai_key",
            "mistral_key",
            "openrouter_key",
            "custom_key",
            "github_token",
            "sentry_token",
        )
    },
    "git_ssh:default": {
        "id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n-----END OPENSSH PRIVATE KEY-----\n",
        "username": "Agent Bot",
        "email": "bot@acme.example",
    },
    "github_webhook_secret:MyOrg": {"secret": "github-secret-myorg"},
    "github_webhook_secret:action-llama": {"secret": "github-secret-al"},
    "sentry_client_secret:SentryProd": {"secret": "sentry-secret"},
    "linear_webhook_secret:LinearMain": {"secret": "linear-secret"},
    "linear_webhook_secret:main-workspace": {"secret": "linear-secret-2"},
    "mintlify_webhook_secret:MintlifyMain": {"secret": "mintlify-secret"},
    "mintlify_webhook_secret:docs-project": {"secret": "mintlify-secret-2"},
    "slack_signing_secret:MainWorkspace": {"secret": "slack-secret"},
    "discord_bot:MyBot": {
        "application_id": "123",
        "public_key": "e" * 64,
        "bot_token": "discord-not-a-token",
    },
    "x_twitter_api:MyXApp": {
        "consumer_key": "ck",
        "consumer_secret": "cs",
        "bearer_token": "bt",
    },
}


def store_credentials(root: Path) -> Path:
    """Write ``CREDENTIALS`` as a credential store at ``root`` (``AL_CREDENTIALS_DIR``)."""
    from llamaherd.credentials import CredentialStore

    store = CredentialStore(root)
    for ref, fields in CREDENTIALS.items():
        kind, _, instance = ref.partition(":")
        store.write(kind, instance, fields)
    return root


@pytest.fixture
def corpus(tmp_path: Path) -> Callable[[str], Path]:
    """``corpus(name)``: a copy of ``projects/<name>`` under ``tmp_path``, with the credential
    store the ``al`` fixture uses (``tmp_path/credentials``) filled."""
    store_credentials(tmp_path / "credentials")

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(CORPUS / name, target)
        return target

    return copy


DEBIAN_IMAGE = "local/debian-python:bookworm"
AL = Path(sys.executable).with_name("al")


@pytest.fixture(scope="module")
def docker() -> Iterator[Any]:
    """A client, once ``al-agent:latest`` is built (as ``al setup docker`` does)."""
    from llamaherd_docker.daemon import connect

    require_service("docker")
    client = connect()
    done = subprocess.run(
        [str(AL), "setup", "docker", "--base-image", DEBIAN_IMAGE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield client


@pytest.fixture
def built(docker: Any) -> Iterator[list[Path]]:
    """Projects whose images are removed at teardown: append their roots."""
    roots: list[Path] = []
    yield roots
    for root in roots:
        for image in docker.images.list(filters={"label": f"llamaherd.project={root}"}):
            for tag in image.tags:
                docker.images.remove(tag, force=True)

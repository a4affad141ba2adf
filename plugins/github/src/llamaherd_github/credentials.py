"""GitHub credential types (github_token, git_ssh, github_webhook_secret) and the gh/git skill.

Type and field names are the ones existing users have on disk:
``github_token/<i>/token``, ``git_ssh/<i>/{id_rsa,username,email}``,
``github_webhook_secret/<i>/secret``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from llamaherd.api import CredentialField, CredentialInvalid, Tool

DEFAULT_API_URL = "https://api.github.com"
TIMEOUT = 10.0


def api_url() -> str:
    """GitHub's REST API base: ``$AL_GITHUB_API_URL`` (GitHub Enterprise, tests) or api.github.com."""
    return os.environ.get("AL_GITHUB_API_URL", DEFAULT_API_URL).rstrip("/")


class GitHubToken:
    name = "github_token"
    description = "GitHub token for the gh CLI and git over HTTPS (needs repo scope)"
    fields = [
        CredentialField("token", secret=True, description="GitHub token (ghp_..., github_pat_...)")
    ]

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        token = values["token"]
        return {"GITHUB_TOKEN": token, "GH_TOKEN": token}

    def context(self, values: dict[str, str]) -> str:
        return (
            "GitHub token in `GITHUB_TOKEN` and `GH_TOKEN`: the `gh` CLI is authenticated; "
            "for git over HTTPS run `gh auth setup-git` once."
        )

    def validate(self, values: dict[str, str]) -> str:
        """GET /user with the token; report the login and the token's OAuth scopes."""
        import requests

        base = api_url()
        try:
            response = requests.get(
                f"{base}/user",
                headers={
                    "Authorization": f"token {values['token']}",
                    "Accept": "application/vnd.github+json",
                    "User-Agent": "llamaherd",
                },
                timeout=TIMEOUT,
            )
        except requests.RequestException as exc:
            raise CredentialInvalid(f"cannot reach {base}: {type(exc).__name__}") from None
        if response.status_code == 401:
            raise CredentialInvalid(
                f"GitHub refused the token (401 {_message(response)}) at {base}/user"
            )
        if not response.ok:
            raise CredentialInvalid(
                f"{base}/user answered {response.status_code} {_message(response)}"
            )
        login = _json(response).get("login", "?")
        scopes = response.headers.get("X-OAuth-Scopes")
        if scopes is None:  # fine-grained and app tokens send no scopes header at all
            return f"authenticated as {login}; scopes: not reported (fine-grained token)"
        return f"authenticated as {login}; scopes: {scopes.strip() or '(none)'}"


def _json(response: Any) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _message(response: Any) -> str:
    return str(_json(response).get("message") or response.reason or "").strip()


class GitSSH:
    name = "git_ssh"
    description = "SSH key and identity for git clone/push over SSH"
    fields = [
        CredentialField(
            "id_rsa", secret=True, description="SSH private key (use --file id_rsa=PATH)"
        ),
        CredentialField("username", secret=False, description="git author and committer name"),
        CredentialField("email", secret=False, description="git author and committer email"),
    ]
    # ssh refuses a key that others can read; 0600 is what ssh-keygen writes.
    file_modes = {"id_rsa": 0o600}

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        key = shlex.quote(str(Path(path) / "id_rsa"))
        env = {
            "GIT_SSH_COMMAND": f"ssh -i {key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes"
        }
        identity = {"NAME": values.get("username", ""), "EMAIL": values.get("email", "")}
        for role in ("AUTHOR", "COMMITTER"):
            # An empty ident makes git refuse to commit; unset lets it fall back to git config.
            env.update({f"GIT_{role}_{part}": value for part, value in identity.items() if value})
        return env

    def context(self, values: dict[str, str]) -> str:
        who = f"{values.get('username', '?')} <{values.get('email', '?')}>"
        return (
            f"SSH key for git over SSH (`GIT_SSH_COMMAND`, strict host-key checking); "
            f"commits are authored as {who}."
        )


class GitHubWebhookSecret:
    name = "github_webhook_secret"
    description = "Shared secret that verifies GitHub webhook deliveries (X-Hub-Signature-256)"
    fields = [CredentialField("secret", secret=True, description="the webhook's secret")]
    # Only the scheduler's webhook source uses it: it never enters a sandbox.
    sandbox = False

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        return {}

    def context(self, values: dict[str, str]) -> str:
        return (
            "GitHub webhook secret (used by the scheduler to verify deliveries; nothing exported)."
        )


CREDENTIAL_TYPES = [GitHubToken(), GitSSH(), GitHubWebhookSecret()]

PREAMBLE = """\
GitHub: the `gh` CLI and `git` are available and authenticated via `GITHUB_TOKEN`.
Use `gh` for issues, pull requests, reviews and API calls (`gh api ...`); for git over HTTPS run \
`gh auth setup-git` once. Never print the token."""


class GitHubSkill:
    """Tells the model that gh and git are ready when a run has a github_token staged."""

    name = "github"
    category = "credentials"
    tools: list[Tool] = []

    def preamble(self, run: Any) -> str:
        from llamaherd.api import parse_ref

        agent = getattr(run, "agent", None)
        declared = agent.credentials if agent is not None else []
        if not any(parse_ref(ref)[0] == "github_token" for ref in declared):
            return ""
        return PREAMBLE

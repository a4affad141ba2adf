"""GitHub credential types: env, context, validate over real HTTP, GIT_SSH_COMMAND with real ssh."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from llamaherd_github.credentials import CREDENTIAL_TYPES, GitHubSkill

from llamaherd.api import CredentialInvalid, CredentialStore, credential_files
from llamaherd.testing import require_service

TYPES = {t.name: t for t in CREDENTIAL_TYPES}
AL = [sys.executable, "-c", "from llamaherd.cli import main; main()"]
GOOD_TOKEN = "ghp_goodTokenForTests0123456789"


class FakeGitHub(BaseHTTPRequestHandler):
    """GitHub's ``GET /user`` wire format: 200 with X-OAuth-Scopes, or 401 Bad credentials."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.headers.get("Authorization", ""))
        if self.path != "/user":
            self._send(404, {"message": "Not Found"})
        elif self.headers.get("Authorization") == f"token {GOOD_TOKEN}":
            self._send(
                200,
                {"login": "octocat", "id": 1, "type": "User"},
                {"X-OAuth-Scopes": "repo, workflow", "X-Accepted-OAuth-Scopes": ""},
            )
        else:
            self._send(
                401,
                {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"},
            )

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def github_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeGitHub.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def al_env(tmp_path, github_api) -> dict[str, str]:
    """Env for a real `al` subprocess: only this plugin, a temp store, the fake API."""
    return {
        **os.environ,
        "AL_LOAD_PLUGINS": "github",
        "AL_CREDENTIALS_DIR": str(tmp_path / "creds"),
        "AL_GITHUB_API_URL": github_api,
    }


def run_al(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AL, *args], env=env, capture_output=True, text=True, timeout=60)


# --------------------------------------------------------------------------- github_token


def test_github_token_env_and_context():
    token = TYPES["github_token"]
    assert token.env({"token": "ghp_x1"}, Path("/credentials/github_token/default")) == {
        "GITHUB_TOKEN": "ghp_x1",
        "GH_TOKEN": "ghp_x1",
    }
    assert "ghp_x1" not in token.context({"token": "ghp_x1"})
    assert "GITHUB_TOKEN" in token.context({"token": "ghp_x1"})


def test_validate_reports_login_and_scopes(github_api, monkeypatch):
    monkeypatch.setenv("AL_GITHUB_API_URL", github_api + "/")
    assert TYPES["github_token"].validate({"token": GOOD_TOKEN}) == (
        "authenticated as octocat; scopes: repo, workflow"
    )
    assert FakeGitHub.seen == [f"token {GOOD_TOKEN}"]
    with pytest.raises(
        CredentialInvalid, match=r"GitHub refused the token \(401 Bad credentials\)"
    ):
        TYPES["github_token"].validate({"token": "ghp_revoked"})


def test_validate_unreachable_api(monkeypatch):
    monkeypatch.setenv("AL_GITHUB_API_URL", "http://127.0.0.1:9")  # discard port: refused
    with pytest.raises(CredentialInvalid, match="cannot reach http://127.0.0.1:9: ConnectionError"):
        TYPES["github_token"].validate({"token": "ghp_any"})


def test_cli_add_from_env_then_test_good_and_revoked(al_env, tmp_path):
    """Real `al` processes: add never echoes the value; test prints ok with scopes or fails."""
    added = run_al(
        {**al_env, "MY_GH": GOOD_TOKEN}, "creds", "add", "github_token", "--from-env", "MY_GH"
    )
    assert added.returncode == 0, added.stderr
    assert GOOD_TOKEN not in added.stdout + added.stderr
    token_file = tmp_path / "creds" / "github_token" / "default" / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text() == GOOD_TOKEN + "\n"

    ok = run_al(al_env, "creds", "test", "github_token")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "ok: github_token: authenticated as octocat; scopes: repo, workflow\n"

    CredentialStore(tmp_path / "creds").write(
        "github_token", "old", {"token": "ghp_revokedToken99"}
    )
    refused = run_al(al_env, "creds", "test", "github_token:old")
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        "failed: github_token:old: GitHub refused the token "
        f"(401 Bad credentials) at {al_env['AL_GITHUB_API_URL']}/user"
    )
    assert "ghp_revokedToken99" not in refused.stdout + refused.stderr


def test_cli_types_lists_github_types(al_env):
    result = run_al(al_env, "creds", "types", "--json")
    rows = {row["type"]: row for row in json.loads(result.stdout)}
    assert rows["github_token"]["env"] == ["GH_TOKEN", "GITHUB_TOKEN"]
    assert rows["git_ssh"]["env"] == [
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_SSH_COMMAND",
    ]
    assert rows["github_webhook_secret"]["staged"] is False


# --------------------------------------------------------------------------- git_ssh


@pytest.fixture
def ssh_key(tmp_path) -> str:
    require_service("ssh_client")
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(tmp_path / "k")],
        check=True,
        timeout=30,
    )
    return (tmp_path / "k").read_text()


def stage(directory: Path, credential_type, values: dict[str, str]) -> None:
    """Write the files the way a runtime does, with the modes the type asks for."""
    directory.mkdir(parents=True)
    types = {credential_type.name: credential_type}
    for staged in credential_files(types, {f"{credential_type.name}/x": values}):
        target = directory / staged.path.rsplit("/", 1)[1]
        target.write_bytes(staged.content)
        os.chmod(target, staged.mode)


def test_git_ssh_command_with_real_ssh(tmp_path, ssh_key):
    git_ssh = TYPES["git_ssh"]
    values = {"id_rsa": ssh_key.strip(), "username": "Deploy Bot", "email": "bot@example.com"}
    staged = tmp_path / "staged root" / "git_ssh" / "deploy"  # a space: the path must be quoted
    stage(staged, git_ssh, values)
    assert stat.S_IMODE((staged / "id_rsa").stat().st_mode) == 0o600
    env = git_ssh.env(values, staged)
    assert {k: v for k, v in env.items() if k != "GIT_SSH_COMMAND"} == {
        "GIT_AUTHOR_NAME": "Deploy Bot",
        "GIT_AUTHOR_EMAIL": "bot@example.com",
        "GIT_COMMITTER_NAME": "Deploy Bot",
        "GIT_COMMITTER_EMAIL": "bot@example.com",
    }

    # git runs GIT_SSH_COMMAND through the shell; ssh -G prints the resolved config.
    printed = subprocess.run(
        f"{env['GIT_SSH_COMMAND']} -G github.com",
        shell=True,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    config = {}
    for line in printed.splitlines():
        key, _, value = line.partition(" ")
        config.setdefault(key, []).append(value)
    assert config["identityfile"] == [str(staged / "id_rsa")]
    assert config["stricthostkeychecking"] == ["true"]
    assert config["identitiesonly"] == ["yes"]

    # ssh accepts the staged key file as written (content, final newline and mode).
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", shlex.split(env["GIT_SSH_COMMAND"])[2]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert public.returncode == 0, public.stderr
    assert public.stdout.startswith("ssh-ed25519 ")


def test_git_ssh_without_identity_leaves_git_defaults():
    env = TYPES["git_ssh"].env({"id_rsa": "k", "username": "", "email": ""}, Path("/c/git_ssh/x"))
    assert env == {
        "GIT_SSH_COMMAND": "ssh -i /c/git_ssh/x/id_rsa -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes"
    }


def test_git_ssh_context_names_identity_not_key(ssh_key):
    text = TYPES["git_ssh"].context({"id_rsa": ssh_key, "username": "bot", "email": "b@x.org"})
    assert "bot <b@x.org>" in text and "PRIVATE KEY" not in text


def test_webhook_secret_exports_nothing():
    secret = TYPES["github_webhook_secret"]
    assert secret.env({"secret": "whsec"}, Path("/x")) == {}
    assert "whsec" not in secret.context({"secret": "whsec"})


# --------------------------------------------------------------------------- skill


def test_github_skill():
    skill = GitHubSkill()
    assert (skill.name, skill.category, skill.tools) == ("github", "credentials", [])

    def run_of(*credentials: str) -> SimpleNamespace:
        return SimpleNamespace(agent=SimpleNamespace(credentials=list(credentials)))

    text = skill.preamble(run_of("github_token:work"))
    assert "`gh`" in text and "`git`" in text and "GITHUB_TOKEN" in text
    assert skill.preamble(run_of("git_ssh")) == ""
    assert skill.preamble(run_of()) == "", "agents without a github_token are not told about gh"

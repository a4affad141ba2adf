"""Install llamaherd-sentry with pip, as a user would, and use it through the `al` command."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest

from llamaherd.testing import pip_installed

DIST = Path(__file__).resolve().parents[1]
AL = [sys.executable, "-c", "from llamaherd.cli import main; main()"]
GOOD_TOKEN = "sntrys_goodTokenForTests123"


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    """pip-install the distribution (unless the venv already has it) and remove it after;
    serialised with other test sessions sharing the venv (see ``pip_installed``)."""
    with pip_installed(DIST, "llamaherd-sentry"):
        yield


class FakeSentry(BaseHTTPRequestHandler):
    """Sentry's API root (``GET /api/0/``): auth scopes for a good token, 401 otherwise."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") == f"Bearer {GOOD_TOKEN}":
            status, body = (
                200,
                {
                    "version": "0",
                    "user": {"email": "dev@example.com"},
                    "auth": {"scopes": ["project:read", "event:read"]},
                },
            )
        else:
            status, body = 401, {"detail": "Invalid token"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def env(tmp_path) -> Iterator[dict[str, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSentry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {
            **os.environ,
            "AL_LOAD_PLUGINS": "sentry",
            "AL_CREDENTIALS_DIR": str(tmp_path),
            "AL_SENTRY_API_URL": f"http://127.0.0.1:{server.server_address[1]}/api/0",
        }
    finally:
        server.shutdown()
        server.server_close()


def al(env: dict[str, str], *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([*AL, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == expect, f"al {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def test_shows_in_al_plugins_and_creds_types(installed, env):
    listed = json.loads(al(env, "plugins", "--json").stdout)
    sentry = next(info for info in listed if info["name"] == "sentry")
    assert sentry["distribution"] == "llamaherd-sentry"
    assert "credential-type:sentry_token" in sentry["registers"]

    types = {row["type"]: row for row in json.loads(al(env, "creds", "types", "--json").stdout)}
    assert types["sentry_token"]["plugin"] == "sentry"
    assert types["sentry_token"]["env"] == ["SENTRY_AUTH_TOKEN"]
    assert types["sentry_token"]["fields"][0]["secret"] is True


def test_add_and_test_against_sentry_api(installed, env):
    added = al(
        {**env, "TOKEN_VAR": GOOD_TOKEN}, "creds", "add", "sentry_token", "--from-env", "TOKEN_VAR"
    )
    assert GOOD_TOKEN not in added.stdout + added.stderr
    ok = al(env, "creds", "test", "sentry_token")
    assert (
        ok.stdout
        == "ok: sentry_token: authenticated as dev@example.com; scopes: project:read, event:read\n"
    )

    al(
        {**env, "TOKEN_VAR": "sntrys_revoked"},
        "creds",
        "add",
        "sentry_token:old",
        "--from-env",
        "TOKEN_VAR",
    )
    refused = al(env, "creds", "test", "sentry_token:old", expect=1)
    assert "failed: sentry_token:old: Sentry refused the token (401)" in refused.stderr


STAGE_CHECK = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
staged="$AL_CREDENTIALS_PATH/sentry_token/default/token"
[ "$(cat "$staged")" = "$SENTRY_AUTH_TOKEN" ] && echo "staged ${#SENTRY_AUTH_TOKEN} chars: $SENTRY_AUTH_TOKEN"
'''}}]

[[turns]]
text = "{{ last_result }}"
"""


def test_staged_into_a_run(installed, env, tmp_path):
    """A real foreground run (host-user runtime as this user, scripted model) gets the token."""
    for dist in ("llamaherd-scripted", "llamaherd-host-user"):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed")

    agent = tmp_path / "proj" / "agents" / "reporter"
    agent.mkdir(parents=True)
    (agent.parent.parent / "config.toml").write_text(
        '[models.scripted]\nprovider = "scripted"\nmodel = "scripted"\n'
    )
    (agent / "SKILL.md").write_text("---\nname: reporter\ndescription: d\n---\nReport.\n")
    (agent / "config.toml").write_text(
        'models = ["scripted"]\ncredentials = ["sentry_token"]\n'
        f'[runtime]\ntype = "host-user"\nrun_as = "{getpass.getuser()}"\n'
    )
    (agent / "script.toml").write_text(STAGE_CHECK)
    run_env = {**env, "AL_LOAD_PLUGINS": "sentry,scripted,host-user", "TOKEN_VAR": GOOD_TOKEN}
    al(run_env, "creds", "add", "sentry_token", "--from-env", "TOKEN_VAR")
    run = al(run_env, "--project", str(agent.parent.parent), "run", "reporter")
    assert f"staged {len(GOOD_TOKEN)} chars: ***" in run.stdout
    assert GOOD_TOKEN not in run.stdout + run.stderr

"""llamaherd-pager through the `al` command, installed with pip as a user would (its tox env,
`tox -e plugin-pager`, installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject

DIST = Path(__file__).resolve().parents[1]
AL = [sys.executable, "-c", "from llamaherd.cli import main; main()"]
GOOD_TOKEN = "u+goodKeyForTests123"


def users_me(request):
    """PagerDuty's ``GET /users/me``: the key's user, or 401."""
    if request["headers"].get("authorization") == f"Token token={GOOD_TOKEN}":
        return 200, {"user": {"email": "oncall@example.com", "name": "On Call"}}
    return 401, {"error": {"message": "Unauthorized", "code": 2006}}


@pytest.fixture
def env(tmp_path, fake_service) -> dict[str, str]:
    service = fake_service({("GET", "/users/me"): users_me})
    return {
        **os.environ,
        "AL_LOAD_PLUGINS": "pager",
        "AL_CREDENTIALS_DIR": str(tmp_path),
        "AL_PAGERDUTY_API_URL": service.url,
    }


def al(env: dict[str, str], *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    result = subprocess.run([*AL, *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == expect, f"al {' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def test_shows_in_al_plugins_and_creds_types(env):
    listed = json.loads(al(env, "plugins", "--json").stdout)
    pager = next(info for info in listed if info["name"] == "pager")
    assert pager["distribution"] == "llamaherd-pager"
    assert pager["registers"] == ["credential-type:pager_token"]

    types = {row["type"]: row for row in json.loads(al(env, "creds", "types", "--json").stdout)}
    assert types["pager_token"]["plugin"] == "pager"
    assert types["pager_token"]["env"] == ["PAGERDUTY_TOKEN"]
    assert types["pager_token"]["fields"][0]["secret"] is True


def test_add_and_test_against_the_pagerduty_api(env):
    added = al(
        {**env, "TOKEN_VAR": GOOD_TOKEN}, "creds", "add", "pager_token", "--from-env", "TOKEN_VAR"
    )
    assert GOOD_TOKEN not in added.stdout + added.stderr
    ok = al(env, "creds", "test", "pager_token")
    assert ok.stdout == "ok: pager_token: authenticated as oncall@example.com\n"

    al(
        {**env, "TOKEN_VAR": "u+revoked"},
        "creds",
        "add",
        "pager_token:old",
        "--from-env",
        "TOKEN_VAR",
    )
    refused = al(env, "creds", "test", "pager_token:old", expect=1)
    assert "failed: pager_token:old: PagerDuty refused the credential (401)" in refused.stderr


STAGE_CHECK = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
staged="$AL_CREDENTIALS_PATH/pager_token/default/token"
[ "$(cat "$staged")" = "$PAGERDUTY_TOKEN" ] && echo "staged ${#PAGERDUTY_TOKEN} chars: $PAGERDUTY_TOKEN"
'''}}]

[[turns]]
text = "{{ last_result }}"
"""


def test_staged_into_a_run(env, tmp_path):
    """A real foreground run (offline model and runtime, as this user) gets the token."""
    run_env = {k: v for k, v in env.items() if k != "AL_LOAD_PLUGINS"}
    project = OfflineProject(tmp_path / "proj", env={**run_env, "TOKEN_VAR": GOOD_TOKEN})
    project.add_scripted_agent("reporter", 'credentials = ["pager_token"]\n', STAGE_CHECK)
    project.al("creds", "add", "pager_token", "--from-env", "TOKEN_VAR", check=True)
    run = project.al("run", "reporter", check=True)
    assert f"staged {len(GOOD_TOKEN)} chars: ***" in run.stdout
    assert GOOD_TOKEN not in run.stdout + run.stderr

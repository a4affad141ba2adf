"""Every installed webhook source through a real `al start`: `al webhooks replay`, a signed
`al webhooks test`, a forged delivery in the dead-letter list (`al webhooks ls --dead`), and
X's CRC on GET. Agents here have no model: they are held (state error) but their work queues."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import pytest
import requests

from llamaherd.api import CredentialStore
from llamaherd.testing import TmpProject, wait_until


def _discord_keys() -> tuple[str, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private.private_bytes_raw().hex(), public.hex()


@dataclass
class Case:
    kind: str
    credential: str
    values: dict[str, str]
    payload: dict
    event: str
    filters: str  # the agent's [[webhooks]] filter lines
    answer: str  # what `al webhooks test` prints after the status line, in part
    status: int = 202
    test_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def cases() -> list[Case]:
    secret = {"secret": "a-shared-secret-for-tests"}
    found = [
        Case(
            "sentry",
            "sentry_client_secret",
            secret,
            {"action": "created", "data": {"issue": {"title": "Boom", "project": {"slug": "web"}}}},
            "issue",
            'resources = ["issue"]\nprojects = ["web"]',
            '"agents":["listener"]',
        ),
        Case(
            "linear",
            "linear_webhook_secret",
            secret,
            {
                "action": "create",
                "type": "Issue",
                "organizationId": "org-1",
                "data": {"number": 1, "title": "Boom", "labels": [{"name": "Bug"}]},
                "webhookTimestamp": 1000,  # stale: `al webhooks test` renews it
            },
            "issues",
            'events = ["issues"]\norganizations = ["org-1"]\nlabels = ["Bug"]',
            '"agents":["listener"]',
        ),
        Case(
            "slack",
            "slack_signing_secret",
            secret,
            {
                "type": "event_callback",
                "team_id": "T1",
                "event_id": "Ev1",
                "event": {"type": "app_mention", "channel": "C1", "user": "U1", "text": "hi"},
            },
            "app_mention",
            'events = ["app_mention"]\nchannels = ["C1"]\nteam_ids = ["T1"]',
            '"agents":["listener"]',
        ),
        Case(
            "mintlify",
            "mintlify_webhook_secret",
            secret,
            {"event": "deployment", "action": "failed", "project": "docs", "branch": "main"},
            "deployment",
            'actions = ["failed"]\nprojects = ["docs"]\nbranches = ["main"]',
            '"agents":["listener"]',
        ),
        Case(
            "twitter",
            "x_twitter_api",
            {"consumer_key": "ck", "consumer_secret": "cs-for-tests", "bearer_token": "bt"},
            {"for_user_id": "42", "tweet_create_events": [{"id_str": "1", "text": "hi"}]},
            "tweet_create_events",
            'events = ["tweet_create_events"]\nusers = ["42"]',
            '"agents":["listener"]',
        ),
    ]
    try:
        private, public = _discord_keys()
    except ImportError:  # llamaherd-discord (and cryptography) not installed
        return found
    discord = {"application_id": "1", "public_key": public, "bot_token": "t"}
    found.append(
        Case(
            "discord",
            "discord_bot",
            discord,
            {
                "type": 2,
                "id": "9",
                "guild_id": "G1",
                "channel_id": "C1",
                "data": {"name": "deploy"},
            },
            "application_command",
            'commands = ["deploy"]\nguilds = ["G1"]',
            '{"type":5}',
            status=200,
            test_args=["--signing-key-env", "TEST_DISCORD_KEY"],
            env={"TEST_DISCORD_KEY": private},
        )
    )
    return found


@pytest.fixture(params=cases(), ids=lambda case: case.kind)
def case(request):
    from llamaherd.plugins import registry

    if request.param.kind not in registry().webhook_sources:
        pytest.skip(f"llamaherd-{request.param.kind} is not installed")
    return request.param


@pytest.fixture
def project(tmp_path, case):
    creds = tmp_path / "creds"
    CredentialStore(creds).write(case.credential, "default", case.values)
    project = TmpProject(tmp_path / "project")
    project.config(f'[gateway]\nport = 0\n\n[webhooks.hook]\ntype = "{case.kind}"\n')
    project.add_agent("listener", f'[[webhooks]]\nsource = "hook"\n{case.filters}\n')
    project.add_agent("other", '[[webhooks]]\nsource = "hook"\nevents = ["nothing-sends-this"]\n')
    project.env = {"AL_CREDENTIALS_DIR": str(creds), **case.env}
    project.write("payload.json", json.dumps(case.payload))
    return project


def al(project, *args):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **project.env},
    )


def test_replay_test_and_dead_letters(project, case, scheduler):
    payload = str(project.root / "payload.json")
    replay = al(project, "webhooks", "replay", payload, "--event", case.event)
    assert replay.returncode == 0, replay.stderr
    assert "matches 1 agent(s): listener" in replay.stdout, replay.stdout

    process = scheduler(project)
    sent = al(
        project,
        "webhooks",
        "test",
        "listener",
        "--event",
        case.event,
        "--payload",
        payload,
        *case.test_args,
    )
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"HTTP {case.status}") and case.answer in sent.stdout, sent.stdout

    forged = requests.post(f"{process.url}/webhooks/hook", data=b"{}", timeout=10)
    assert forged.status_code == 401
    dead = json.loads(al(project, "webhooks", "ls", "--dead", "--json").stdout)
    assert [(d["source"], d["status"]) for d in dead] == [("hook", 401)]
    listing = al(project, "webhooks", "ls").stdout
    assert "listener" in listing

    if not case.test_args:  # a shared secret: a delivery signed with a wrong one is refused
        project.env["WRONG_SECRET"] = "not-the-secret"
        args = ["--event", case.event, "--payload", payload, "--signing-key-env", "WRONG_SECRET"]
        refused = al(project, "webhooks", "test", "listener", *args)
        assert refused.returncode == 1 and refused.stdout.startswith("HTTP 401"), refused.stdout


def test_twitter_crc_through_the_scheduler(project, case, scheduler):
    if case.kind != "twitter":
        pytest.skip("only X answers a GET")
    process = scheduler(project)
    response = wait_until(
        lambda: requests.get(
            f"{process.url}/webhooks/hook", params={"crc_token": "t0k"}, timeout=10
        )
    )
    assert response.status_code == 200 and response.json()["response_token"].startswith("sha256=")

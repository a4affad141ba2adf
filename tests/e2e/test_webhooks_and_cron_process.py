"""Acceptance through a real `al start` process: webhooks run agents, waits resume, cron holds
across restarts (fake clock via AL_FAKE_CLOCK_FILE, no sleeping until ticks)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid
from datetime import UTC, datetime

import pytest
import requests

from llamaherd.testing import wait_until

SECRET = "process-test-secret"


def runs(project, agent=None):
    store = project.store()
    try:
        return store.runs(agent=agent, limit=1000)
    finally:
        store.close()


@pytest.fixture
def credentials(tmp_path):
    from llamaherd.api import CredentialStore

    root = tmp_path / "credentials"
    CredentialStore(root).write("github_webhook_secret", "default", {"secret": SECRET})
    return root


@pytest.fixture
def project(tmp_path):
    from llamaherd.testing import OfflineProject

    return OfflineProject(tmp_path / "project", '[webhooks.github]\ntype = "github"\n')


@pytest.fixture
def start(project, scheduler, credentials):
    """Start `al start` for the project; return once its triggers run (logged after start-up)."""

    def run(**env: str):
        process = scheduler(project, {"AL_CREDENTIALS_DIR": str(credentials), **env})
        wait_until(lambda: "listening on" in process.read_log())
        return process

    return run


def deliver(
    url: str, payload: dict, event: str = "pull_request", secret: str = SECRET, delivery=None
):
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256="
        + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }
    return requests.post(f"{url}/webhooks/github", data=body, headers=headers, timeout=10)


PR_OPENED = {
    "action": "opened",
    "number": 7,
    "pull_request": {"number": 7, "base": {"ref": "main"}, "user": {"login": "alice"}},
    "repository": {"full_name": "acme/widgets"},
    "sender": {"login": "alice"},
}
REVIEWER = """
webhooks = [{ source = "github", events = ["pull_request"], actions = ["opened"], repos = ["acme/widgets"], branches = ["main"] }]
"""


def test_signed_pull_request_runs_the_matching_agent_only(project, start):
    project.add_scripted_agent("reviewer", REVIEWER)
    project.add_scripted_agent("closer", REVIEWER.replace('"opened"', '"closed"'))
    project.add_scripted_agent("elsewhere", REVIEWER.replace("acme/widgets", "acme/other"))
    scheduler = start()

    assert deliver(scheduler.url, PR_OPENED, secret="forged").status_code == 401
    too_big = {**PR_OPENED, "padding": "x" * (2 * 1024 * 1024)}
    assert deliver(scheduler.url, too_big).status_code == 413
    response = deliver(scheduler.url, PR_OPENED, delivery="delivery-1")
    assert response.status_code == 202 and response.json()["agents"] == ["reviewer"]
    again = deliver(scheduler.url, PR_OPENED, delivery="delivery-1")
    assert again.status_code == 200 and again.json()["duplicate"]

    [run] = wait_until(lambda: [r for r in runs(project, "reviewer") if r.state == "done"])
    assert run.trigger["kind"] == "webhook" and run.trigger["payload"]["number"] == 7
    # A run queued after them all goes through the dispatcher last: nothing else was queued.
    assert scheduler.post("/control/run", {"agent": "closer"}).status_code == 202
    wait_until(lambda: [r for r in runs(project, "closer") if r.state == "done"])
    kinds = sorted((r.agent, r.trigger["kind"]) for r in runs(project))
    assert kinds == [("closer", "manual"), ("reviewer", "webhook")], "no other run, and only one"


def test_a_webhook_runs_script_reads_the_bodys_fields_as_documented(project, start):
    """Issue 42 item 10: in script.toml, ``{{ payload.<key> }}`` of a webhook run reads the
    delivery's body (``payload.status``) and its fields (``payload.event``,
    ``payload.number``), as writing-agents.md shows; ``payload.payload`` stays the body."""
    script = (
        '[[turns]]\ntool_calls = [{ name = "return_value", arguments = { value = '
        '"{{ payload.status }}|{{ payload.event }}|{{ payload.number }}|{{ payload.source }}|'
        '{{ payload.payload.status }}" } }]\n[[turns]]\ntext = "ok"\n'
    )
    project.add_scripted_agent("reader", REVIEWER, script=script)
    scheduler = start()
    assert deliver(scheduler.url, {**PR_OPENED, "status": "green"}).status_code == 202
    [run] = wait_until(lambda: [r for r in runs(project, "reader") if r.state == "done"])
    assert run.return_value == "green|pull_request|7|github|green"


def test_waiting_run_resumed_by_a_matching_delivery(project, start):
    project.add_scripted_agent(
        "waiter",
        "",
        script="""
        [[turns]]
        tool_calls = [{ name = "wait_for_trigger", arguments = { filter = { type = "webhooks", event = "pull_request", number = 7 }, timeout = "5m" } }]

        [[turns]]
        tool_calls = [{ name = "return_value", arguments = { value = "got {{ last_result }}" } }]

        [[turns]]
        text = "done"
    """,
    )
    scheduler = start()
    queued = scheduler.post("/control/run", {"agent": "waiter"})
    assert queued.status_code == 202, queued.text
    [run] = wait_until(lambda: [r for r in runs(project, "waiter") if r.state == "waiting"])

    other_pr = {
        **PR_OPENED,
        "number": 8,
        "pull_request": {**PR_OPENED["pull_request"], "number": 8},
    }
    assert deliver(scheduler.url, other_pr).json()["resumed"] == []
    response = deliver(scheduler.url, PR_OPENED)
    assert response.status_code == 202 and response.json()["resumed"] == [run.id]
    done = wait_until(lambda: [r for r in runs(project, "waiter") if r.state == "done"])
    assert "pull_request" in json.dumps(done[0].return_value)


def test_cron_never_fires_twice_across_restart_and_catches_up_once(project, start, tmp_path):
    clock = tmp_path / "clock"

    def set_clock(hour, minute, second=0.0):  # atomically: readers never see a partial file
        tmp = tmp_path / "clock.tmp"
        tmp.write_text(repr(datetime(2026, 1, 5, hour, minute, tzinfo=UTC).timestamp() + second))
        os.replace(tmp, clock)

    project.add_scripted_agent("ticker", 'schedule = "*/5 * * * *"\ntimezone = "UTC"\n')
    set_clock(12, 3)
    first = start(AL_FAKE_CLOCK_FILE=str(clock))
    set_clock(12, 5, 0.2)
    wait_until(lambda: [r for r in runs(project, "ticker") if r.state == "done"])
    first.stop()

    second = start(AL_FAKE_CLOCK_FILE=str(clock))  # same time: the 12:05 tick is taken
    time.sleep(1.5)
    assert len(runs(project, "ticker")) == 1
    second.stop()

    set_clock(12, 31)  # down for 12:10 ... 12:30
    start(AL_FAKE_CLOCK_FILE=str(clock))
    wait_until(lambda: len([r for r in runs(project, "ticker") if r.state == "done"]) == 2)
    time.sleep(1.5)
    ticker = runs(project, "ticker")
    assert len(ticker) == 2, "exactly one catch-up run"
    ticks = sorted(r.trigger["payload"]["tick"] for r in ticker)
    assert ticks[1] - ticks[0] == 25 * 60, "the catch-up is for the latest missed tick (12:30)"


def test_al_webhooks_test_replay_and_ls(project, start, credentials, tmp_path):
    project.add_scripted_agent("reviewer", REVIEWER)
    project.add_scripted_agent("closer", REVIEWER.replace('"opened"', '"closed"'))
    payload = tmp_path / "pr.json"
    payload.write_text(json.dumps(PR_OPENED))

    def al(*args):
        return project.al(*args, env={"AL_CREDENTIALS_DIR": str(credentials)})

    replay = al("webhooks", "replay", str(payload), "--event", "pull_request")
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.strip() == "github: pull_request.opened matches 1 agent(s): reviewer"
    recorded = tmp_path / "recorded.json"
    recorded.write_text(
        json.dumps(
            {
                "headers": {"X-GitHub-Event": "pull_request"},
                "payload": {**PR_OPENED, "action": "closed"},
            }
        )
    )
    assert "matches 1 agent(s): closer" in al("webhooks", "replay", str(recorded)).stdout

    start()
    sent = al("webhooks", "test", "reviewer", "--event", "pull_request", "--payload", str(payload))
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("HTTP 202") and '"agents":["reviewer"]' in sent.stdout
    wait_until(lambda: [r for r in runs(project, "reviewer") if r.state == "done"])

    queued = al("webhooks", "replay", str(recorded), "--run")
    assert "closer: queued item" in queued.stdout, queued.stdout + queued.stderr
    wait_until(lambda: [r for r in runs(project, "closer") if r.state == "done"])

    listing = al("webhooks", "ls")
    assert listing.returncode == 0 and "github" in listing.stdout and "reviewer" in listing.stdout
    assert al("webhooks", "ls", "--dead").stdout.strip() == "no dead letters"

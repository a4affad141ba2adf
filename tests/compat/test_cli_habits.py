"""Action Llama users' commands, through the real ``al``: a task prompt for ``al run`` (in the
foreground and through a scheduler), ``-p`` on every command, ``al status``, ``al start -H -w``,
``al logs -n``, ``al stats -n --calls`` and ``al prompt --trigger webhook --payload``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import OfflineProject

TASK = "fix the flaky test"
PROMPT_BLOCK = (
    f"<user-prompt>\n{TASK}\n</user-prompt>\n\n"
    "You have been given a specific task. Complete the task described above."
)


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=60)
    project.add_scripted_agent("worker")
    return project


def first_user_message(project: OfflineProject, run_id: str) -> str:
    store = project.store()
    try:
        transcript = store.get_run(run_id).transcript
    finally:
        store.close()
    return next(m["content"] for m in transcript if m.get("role") == "user")


def latest_run(project: OfflineProject) -> Any:
    return project.wait_run(lambda runs: runs[0] if runs and runs[0].state == "done" else None)


def test_run_with_a_prompt_in_the_foreground(project):
    result = project.al("run", "worker", TASK)
    assert result.returncode == 0, result.stdout + result.stderr
    run = latest_run(project)
    assert run.host and not (project.root / ".al" / "scheduler.json").exists()
    assert PROMPT_BLOCK in first_user_message(project, run.id)


def test_run_with_a_prompt_through_a_scheduler(project, scheduler):
    sched = scheduler(project)
    result = project.al("run", "worker", TASK, "-H")
    assert result.returncode == 0, result.stdout + result.stderr
    run = latest_run(project)
    info = json.loads((project.root / ".al" / "scheduler.json").read_text())
    assert run.host == info["host"] == sched.get("/control/health").json()["host"]
    assert PROMPT_BLOCK in first_user_message(project, run.id)


def test_project_option_on_every_command(project, tmp_path, al):
    root = str(project.root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = project.env
    assert al("validate", "-p", root, cwd=elsewhere, env=env).returncode == 0
    assert al("run", "worker", "-p", root, cwd=elsewhere, env=env).returncode == 0
    status = al("status", "worker", "--json", "-p", root, cwd=elsewhere, env=env)
    assert [row["agent"] for row in json.loads(status.stdout)["agents"]] == ["worker"]
    logs = al("logs", "worker", "-n", "2", "--project", root, cwd=elsewhere, env=env)
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 2
    raw = al("logs", "worker", "-r", "-n", "1", "-p", root, cwd=elsewhere, env=env)
    assert json.loads(raw.stdout)["type"]
    stats = al("stats", "worker", "-n", "5", "--json", "-p", root, cwd=elsewhere, env=env)
    assert [run["agent"] for run in json.loads(stats.stdout)["recent"]] == ["worker"]
    calls = al("stats", "--calls", "--json", "-p", root, cwd=elsewhere, env=env)
    assert json.loads(calls.stdout) == {"calls": []}
    schema = al("schema", "--project", "-p", root, cwd=elsewhere, env=env)  # its own flag stays
    assert json.loads(schema.stdout)["title"] == "llamaherd project config.toml"


def test_start_accepts_headless_and_web_ui(project, al):
    root = str(project.root)
    started = al("start", "-H", "-w", "--detach", "-p", root, env=project.env)
    assert started.returncode == 0, started.stderr
    try:
        assert "scheduler started" in started.stdout
        assert al("status", "-p", root, env=project.env).returncode == 0
        log = al("logs", "-n", "5", "-p", root, env=project.env)  # no target: the scheduler's
        assert (
            log.returncode == 0
            and "listening on" in (project.root / ".al/scheduler.log").read_text()
        )
    finally:
        assert al("stop", "-p", root, env=project.env).returncode == 0


def test_prompt_shows_what_a_real_webhook_run_gets(tmp_path, al):
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds")
    with (project.root / "config.toml").open("a") as fh:
        fh.write('\n[webhooks.my-github]\ntype = "github"\nallowUnsigned = true\n')
    project.add_scripted_agent(
        "dev", '[[webhooks]]\nsource = "my-github"\nevents = ["issues"]\nlabels = ["agent"]\n'
    )
    # Action Llama's `al webhook replay` fixture: the headers and the body GitHub sent.
    fixture = tmp_path / "issue.json"
    fixture.write_text(
        json.dumps(
            {
                "headers": {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "abc-123"},
                "body": {
                    "action": "labeled",
                    "issue": {
                        "number": 42,
                        "title": "Flaky test",
                        "labels": [{"name": "agent"}],
                        "user": {"login": "bob"},
                    },
                    "repository": {"full_name": "acme/app", "owner": {"login": "acme"}},
                    "sender": {"login": "alice"},
                },
            }
        )
    )
    result = al(
        "prompt", "dev", "--trigger", "webhook", "--payload", str(fixture), cwd=project.root
    )
    assert result.returncode == 0, result.stderr
    block = result.stdout[result.stdout.index("<webhook-trigger>") :].splitlines()
    assert block[1:7] == [
        "source: my-github",
        "event: issues",
        "action: labeled",
        "repo: acme/app",
        "org: acme",
        "number: 42",
    ]
    assert "sender: alice" in block and "delivery: abc-123" in block
    assert result.stderr == ""  # it matches the agent's filters

    # A bare body: the event is the one the agent listens for; a miss is said on stderr.
    bare_body = {"action": "opened", "issue": {"number": 1}, "repository": {"full_name": "a/b"}}
    fixture.write_text(json.dumps(bare_body))
    bare = al("prompt", "dev", "--trigger", "webhook", "--payload", str(fixture), cwd=project.root)
    assert bare.returncode == 0, bare.stderr
    assert "event: issues\naction: opened\n" in bare.stdout
    assert "matches none of dev's [[webhooks]] entries" in bare.stderr

    # A body without what its event needs runs nothing (issue 42 item 2): said, not shown.
    fixture.write_text(json.dumps({"action": "opened", "issue": {"number": 1}}))
    lacking = al(
        "prompt", "dev", "--trigger", "webhook", "--payload", str(fixture), cwd=project.root
    )
    assert lacking.returncode == 2
    assert "(incomplete payload: no repository) without running anything" in lacking.stderr

"""The prompts a run gets, and ``al prompt`` printing the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamaherd import hookimpl
from llamaherd.prompts import Environment, build_prompts
from llamaherd.session import ActiveRun
from llamaherd.types import CredentialField

SECRET = "tok_very_secret_value_1234"


class DemoCredential:
    name = "demo_token"
    description = "test credential"
    fields = [CredentialField("token")]

    def env(self, values, path):
        return {"DEMO_TOKEN": values["token"], "DEMO_DIR": str(path)}

    def context(self, values):
        # A careless type quoting its secret: the prompt must still not carry it.
        return f"The demo CLI is authenticated via DEMO_TOKEN ({values['token']})."


class ModelKey:
    name = "demo_model_key"
    description = "a model key"
    fields = [CredentialField("token")]
    sandbox = False

    def env(self, values, path):
        return {"MODEL_KEY": values["token"]}

    def context(self, values):
        return "never shown"


class Ticker:
    """A trigger type whose block is plain text, as cron's is."""

    name = "ticker"
    kind = "ticked"
    description = "test trigger"
    schema: dict = {}

    def start(self, ctx):
        pass

    def stop(self):
        pass

    def prompt_block(self, trigger):
        return "You are running because the ticker ticked."


class Plugin:
    @hookimpl
    def register_credential_types(self, register):
        register(DemoCredential())
        register(ModelKey())

    @hookimpl
    def register_trigger_types(self, register):
        register(Ticker())


@pytest.fixture
def setup(tmp_project, registered_plugin, monkeypatch, tmp_path):
    from llamaherd.credentials import CredentialStore

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    CredentialStore().write("demo_token", "default", {"token": SECRET})
    registry = registered_plugin(Plugin(), "prompt-test")
    tmp_project.add_agent(
        "bot",
        """
        credentials = ["demo_token", "demo_model_key:main"]
        timeout = 120
        maxTurns = 7
        [params]
        repo = "acme/app"
    """,
        body="Triage new issues.",
    )
    project = tmp_project.load()
    return project.agent("bot"), registry, CredentialStore()


def prompts(setup, trigger, **kw):
    agent, registry, creds = setup
    run = ActiveRun("bot-1", agent, engine=None, store=None)
    return build_prompts(agent, registry, trigger, run=run, credential_store=creds, **kw)


def test_system_prompt_composes_skill_preambles_then_skill_md(setup):
    system, _ = prompts(setup, {"kind": "manual"})
    order = [system.index(h) for h in ("## Calls", "## Locks", "## Signals", "## Wait")]
    assert order == sorted(order)
    for tool in ("call_agent", "acquire_lock", "set_status", "wait_for_trigger", "bash"):
        assert tool in system
    assert system.rstrip().endswith("Triage new issues.")


def test_user_prompt_blocks_without_secret_values(setup):
    _, user = prompts(
        setup,
        {"kind": "ticked"},
        environment=Environment(cwd="/tmp/al-runs/x", timeout=120, max_turns=7),
    )
    assert json.loads(user.split("<agent-config>")[1].split("</agent-config>")[0]) == {
        "repo": "acme/app"
    }
    context = user.split("<credential-context>")[1].split("</credential-context>")[0]
    assert "DEMO_TOKEN" in context and "DEMO_DIR" in context and "authenticated" in context
    assert "MODEL_KEY" not in context and "never shown" not in context
    assert SECRET not in user and "DEMO_TOKEN (***)" in context
    assert "Working directory: /tmp/al-runs/x" in user and "120 s" in user and "7 model" in user
    assert user.rstrip().endswith("the ticker ticked.")
    assert user.count("</") == 3  # three blocks, the ticker's text is plain


def test_each_trigger_kind_gives_one_block(setup):
    _, manual = prompts(setup, {"kind": "manual", "payload": {"x": 1}})
    assert "triggered manually" in manual and '"x": 1' in manual
    _, call = prompts(
        setup,
        {
            "kind": "agent",
            "payload": {
                "caller_agent": "planner",
                "caller_run": "planner-1",
                "context": "check PR 9",
            },
        },
    )
    assert "<skill-subagent>" in call and "caller agent: planner" in call and "check PR 9" in call


def test_recovery_notice_has_absolute_times(setup):
    recovery = {
        "interrupted_run": "bot-0",
        "started_at": 1_700_000_000.0,
        "last_progress": 1_700_000_060.0,
    }
    _, user = prompts(setup, {"kind": "agent", "recovery": recovery}, now=1_700_000_360.0)
    notice = user.split("<recovery-notice>")[1].split("</recovery-notice>")[0]
    assert "bot-0" in notice
    assert "2023-11-14T22:13:20Z" in notice and "2023-11-14T22:14:20Z" in notice
    assert "2023-11-14T22:19:20Z" in notice and "about 300 s" in notice


def test_al_prompt_prints_both(tmp_project, al, tmp_path: Path):
    tmp_project.config('[models.s]\nprovider = "scripted"\nmodel = "x"\n')
    tmp_project.add_agent("bot", 'models = ["s"]\n[params]\nk = "v"\n', body="Be useful.")
    payload = tmp_path / "p.json"
    payload.write_text(json.dumps({"caller_agent": "boss", "context": "do X"}))
    result = al(
        "--project",
        str(tmp_project.root),
        "prompt",
        "bot",
        "--trigger",
        "agent",
        "--payload",
        str(payload),
    )
    assert result.returncode == 0, result.stderr
    assert "=== system ===" in result.stdout and "Be useful." in result.stdout
    assert "caller agent: boss" in result.stdout and '"k": "v"' in result.stdout
    bad = al("--project", str(tmp_project.root), "prompt", "nobody")
    assert bad.returncode == 2 and "no such agent" in bad.stderr

"""The runner and session end to end in one process: real store, real HTTP gateway, real
subprocess sandbox, the scripted model."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from session_runtime import Plugin

CONFIG = """
[models.scripted]
provider = "scripted"
model = "scripted"
"""


@pytest.fixture
def engine(tmp_project, registered_plugin, monkeypatch, tmp_path):
    from llamaherd.engine import Engine

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0.01")
    registered_plugin(Plugin(), "proc-runtime")
    tmp_project.config(CONFIG)
    eng = Engine(tmp_project.load())
    eng.serve(port=0)
    eng.tmp_project = tmp_project
    try:
        yield eng
    finally:
        eng.close()


def add_agent(engine: Any, name: str, script: str, config: str = "") -> Any:
    """An agent on the proc runtime with this script.toml; reloads the project's agents."""
    project = engine.tmp_project
    path = project.add_agent(
        name, 'models = ["scripted"]\n' + textwrap.dedent(config) + '\n[runtime]\ntype = "proc"\n'
    )
    (path / "script.toml").write_text(textwrap.dedent(script))
    engine.project.__dict__.pop("agents", None)  # cached_property: rescan
    return engine.project.agent(name)


def run(engine: Any, agent: str, kind: str = "manual", payload: dict | None = None) -> Any:
    trigger = {"kind": kind, "payload": payload or {}, "prompt": "", "source": None}
    row = engine.store.create_run(agent, kind, trigger=trigger)
    return engine.runner.run(row)


def tool_results(engine: Any, run_id: str) -> list[str]:
    transcript = engine.store.get_run(run_id).transcript
    return [m["content"] for m in transcript if m.get("role") == "tool"]


def test_manual_run_bash_cwd_status_return(engine):
    add_agent(
        engine,
        "worker",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "mkdir -p sub && cd sub && echo hi > f"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "pwd; cat f; setenv GREETING 'hello there'"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo \\"$GREETING\\"; exit 3"}}]
        [[turns]]
        tool_calls = [
          {name = "set_status", arguments = {text = "working on it"}},
          {name = "return_value", arguments = {value = {answer = 42}}},
        ]
        [[turns]]
        text = "All done."
    """,
    )
    final = run(engine, "worker")
    assert (final.state, final.exit_code, final.reason) == ("done", 0, None)
    assert final.status == "working on it"
    assert final.return_value == {"answer": 42}
    results = tool_results(engine, final.id)
    assert results[1].splitlines()[0].endswith("/work/sub")
    assert results[1].splitlines()[1] == "hi"
    assert results[2] == "hello there\n[exit code 3]"
    types = [e["type"] for e in engine.store.events(final.id)]
    assert "model_call" in types and "tool_call" in types


def test_sandbox_commands_reach_the_gateway(engine):
    add_agent(
        engine,
        "cli",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-status 'from the shell' && al-return '{\\"n\\": 1}' && rlock res://a && rlock-heartbeat res://a"}}]
        [[turns]]
        text = "ok"
    """,
    )
    final = run(engine, "cli")
    assert final.state == "done", final.reason
    assert final.status == "from the shell"
    assert final.return_value == {"n": 1}
    out = tool_results(engine, final.id)[0].splitlines()
    assert json.loads(out[0]) == {"ok": True}
    assert json.loads(out[2])["ok"] is True


def test_hooks_pre_failure_ends_the_run_with_its_output(engine):
    add_agent(
        engine,
        "hooked",
        """
        [[turns]]
        text = "never reached"
    """,
        config="""
        [hooks]
        pre = ["echo preparing", "echo broken-step >&2; exit 7"]
    """,
    )
    final = run(engine, "hooked")
    assert (final.state, final.exit_code) == ("error", 1)
    assert "exit 7" in final.reason and "exited 7" in final.reason
    assert "broken-step" in final.reason


def test_max_turns_ends_in_error(engine):
    add_agent(
        engine,
        "looper",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "true"}}]
        loop = true
    """,
        config="maxTurns = 3\n",
    )
    final = run(engine, "looper")
    assert final.state == "error"
    assert "maxTurns (3)" in final.reason


def test_tool_output_auth_failures_abort(engine):
    add_agent(
        engine,
        "denied",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo 'HTTP/1.1 401 Unauthorized'; exit 1"}}]
        loop = true
    """,
    )
    final = run(engine, "denied")
    assert (final.state, final.exit_code) == ("error", 1)
    assert "3 authentication/permission failures" in final.reason


def test_timeout_kills_the_run(engine):
    add_agent(
        engine,
        "sleepy",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "sleep 30"}}]
        [[turns]]
        text = "late"
    """,
        config="timeout = 1\n",
    )
    final = run(engine, "sleepy")
    assert (final.state, final.exit_code) == ("timeout", 124)


def test_secrets_are_redacted(engine, tmp_path):
    from llamaherd.credentials import CredentialStore

    CredentialStore().write("github_token", "default", {"token": "ghp_supersecretvalue123"})
    add_agent(
        engine,
        "leaky",
        """
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo token=$GITHUB_TOKEN"}},
                      {name = "set_status", arguments = {text = "{{ last_result }}"}}]
        [[turns]]
        text = "done"
    """,
        config='credentials = ["github_token"]\n',
    )
    final = run(engine, "leaky")
    assert final.state == "done", final.reason
    assert tool_results(engine, final.id)[0] == "token=***"
    dump = json.dumps([final.transcript, engine.store.events(final.id)])
    assert "ghp_supersecretvalue123" not in dump

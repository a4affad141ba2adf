"""The tool set of Action Llama's default harness (issue 33, item 8), through real runs: the
model is offered bash, read, write, edit, grep, find, ls with the peer's argument names; they
run in the sandbox (as the agent's OS user, not on the scheduler's filesystem); acquire_lock
takes resource_key and ttl_seconds; wait_for_trigger(type="agent_trigger", source_agent=...)
parks a run until that agent calls; check_call answers pending, running, completed, error."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import textwrap
from typing import Any

import pytest

from llamaherd.testing import OfflineProject, chat_reply

PEER_TOOLS = {
    "bash": {"command", "timeout"},
    "read": {"path", "offset", "limit"},
    "write": {"path", "content"},
    "edit": {"path", "edits"},
    "grep": {"pattern", "path", "glob", "ignoreCase", "literal", "context", "limit"},
    "find": {"pattern", "path", "limit"},
    "ls": {"path", "limit"},
    "acquire_lock": {"resource_key", "ttl_seconds"},
    "release_lock": {"resource_key"},
    "call_agent": {"target_agent", "context"},
    "check_call": {"call_id"},
    "set_status": {"text"},
    "return_value": {"value"},
}
AGENT_USER = "al-test-agent"
APP = "x = \u201chello\u201d\nprint(x)  \n"  # curly quotes, trailing spaces: a fuzzy edit


def tool_results(run: Any) -> list[str]:
    return [m["content"] for m in run.transcript if m["role"] == "tool"]


def finished(project: OfflineProject, agent: str) -> Any:
    return project.wait_run(
        lambda runs: next((r for r in runs if r.agent == agent and r.state == "done"), None),
        timeout=60,
    )


def test_the_model_is_offered_the_peers_tools(tmp_path, model_server):
    model_server.reply(200, chat_reply("nothing to do"))
    project = OfflineProject(tmp_path / "proj", timeout=60)
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.fake]\nprovider = "openai"\nmodel = "m"\nbase_url = "{model_server.url}/v1"\n'
        )
    project.add_scripted_agent("asker", 'models = ["fake"]\n')
    result = project.al("run", "asker")
    assert result.returncode == 0, result.stdout + result.stderr
    offered = {
        tool["function"]["name"]: set(tool["function"]["parameters"]["properties"])
        for tool in model_server.requests[0]["body"]["tools"]
    }
    for name, arguments in PEER_TOOLS.items():
        assert arguments <= offered[name], name
    assert {"type", "source", "event", "match", "source_agent", "timeout"} <= offered[
        "wait_for_trigger"
    ]
    assert "read_file" not in offered and "write_file" not in offered


def _agent_user() -> str:
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    from llamaherd_host_user.identity import useradd_command

    try:
        pwd.getpwnam(AGENT_USER)
    except KeyError:
        subprocess.run(useradd_command(AGENT_USER), check=True, capture_output=True)
    return AGENT_USER


def calls(*entries: tuple[str, dict[str, Any]]) -> str:
    """One scripted turn per tool call, then a final answer."""
    turns = [
        f"[[turns]]\ntool_calls = [{{ name = {json.dumps(n)}, arguments = {_toml(a)} }}]\n"
        for n, a in entries
    ]
    return "\n".join([*turns, '[[turns]]\ntext = "done"\n'])


def _toml(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def test_file_tools_work_in_the_sandbox(tmp_path):
    user = _agent_user()
    project = OfflineProject(tmp_path / "proj", timeout=120)
    if project.fakes:
        pytest.skip("needs the scripted provider and the host-user runtime")
    # Readable by the scheduler (root), not by the agent's user: a tool reading it on the
    # scheduler's side would succeed.
    private = tmp_path / "scheduler-only.txt"
    private.write_text("the scheduler's own file\n")
    private.chmod(0o600)
    lines = "\n".join(f"line {n}" for n in range(1, 11)) + "\n"
    script = calls(
        ("write", {"path": "src/app.py", "content": APP}),
        ("write", {"path": "notes/lines.txt", "content": lines}),
        ("write", {"path": ".gitignore", "content": "build/\n"}),
        ("write", {"path": "build/out.py", "content": "print('built')\n"}),
        ("read", {"path": "notes/lines.txt", "offset": 3, "limit": 2}),
        ("edit", {"path": "src/app.py", "edits": [{"oldText": 'x = "hello"', "newText": "x = 1"}]}),
        ("edit", {"path": "src/app.py", "oldText": "print(x)", "newText": "print(x + 1)"}),
        ("edit", {"path": "src/app.py", "oldText": "nowhere", "newText": "x"}),
        ("read", {"path": "src/app.py"}),
        ("grep", {"pattern": "PRINT", "ignoreCase": True}),
        ("grep", {"pattern": "line 5", "path": "notes", "context": 1}),
        ("find", {"pattern": "*.py"}),
        ("ls", {}),
        ("read", {"path": str(private)}),
        ("bash", {"command": "whoami"}),
    )
    project.add_scripted_agent("coder", "", script, run_as=user)
    result = project.al("run", "coder")
    assert result.returncode == 0, result.stdout + result.stderr
    results = tool_results(finished(project, "coder"))
    assert results[0] == f"Successfully wrote {len(APP)} bytes to src/app.py"  # characters
    # As the harness counts: the text after the last newline is a line too.
    assert results[4] == "line 3\nline 4\n\n[7 more lines in file. Use offset=5 to continue.]"
    assert results[5] == "Successfully replaced 1 block(s) in src/app.py."
    assert results[6] == "Successfully replaced 1 block(s) in src/app.py."
    assert "Could not find the exact text in src/app.py" in results[7]
    # The fuzzy match (curly quotes, trailing spaces) replaced in normalised form.
    assert results[8] == "x = 1\nprint(x + 1)\n"
    assert results[9] == "src/app.py:2: print(x + 1)"  # build/ is in .gitignore
    assert results[10] == "lines.txt-4- line 4\nlines.txt:5: line 5\nlines.txt-6- line 6"
    assert results[11] == "src/app.py"
    assert results[12] == ".gitignore\nbuild/\nnotes/\nsrc/"
    assert "error" in results[13] and "the scheduler's own file" not in results[13]
    assert results[14].startswith(user)


def test_locks_calls_and_waits_in_the_peers_call_forms(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", timeout=120)
    if project.fakes:
        pytest.skip("needs the scripted provider and the host-user runtime")
    until = 'until al-subagent-check 1 | grep -q \'"status": "{}"\'; do sleep 0.1; done'
    caller = calls(
        ("acquire_lock", {"resource_key": "lock://repo/main", "ttl_seconds": 7}),
        ("acquire_lock", {"resource_key": "lock://repo/other"}),
        ("call_agent", {"target_agent": "worker", "context": "wait for my word"}),
        ("bash", {"command": until.format("running"), "timeout": 60}),
        ("check_call", {"call_id": 1}),
        ("call_agent", {"target_agent": "worker", "context": "go"}),
        ("bash", {"command": until.format("completed"), "timeout": 60}),
        ("check_call", {"call_id": 1}),
    )
    worker = textwrap.dedent(
        """
        [[turns]]
        tool_calls = [{ name = "wait_for_trigger", arguments = { type = "agent_trigger", source_agent = "caller", timeout = "1h30m" } }]
        [[turns]]
        tool_calls = [{ name = "return_value", arguments = { value = "released" } }]
        [[turns]]
        text = "done"
        """
    )
    project.add_scripted_agent("caller", "", caller)
    project.add_scripted_agent("worker", "", worker)
    sched = scheduler(project)
    assert sched.post("/control/run", {"agent": "caller"}).status_code == 202
    results = tool_results(finished(project, "caller"))
    first, second = json.loads(results[0]), json.loads(results[1])
    assert first["ok"] and second["ok"]
    assert abs((second["expires_at"] - first["expires_at"]) - (1800 - 7)) < 5
    assert json.loads(results[2])["call_id"] == 1
    assert json.loads(results[4])["status"] == "running"
    done = json.loads(results[7])
    assert done["status"] == "completed" and done["return_value"] == "released"
    worker_run = finished(project, "worker")
    resumed = tool_results(worker_run)[0]
    assert "go" in resumed and "caller" in resumed

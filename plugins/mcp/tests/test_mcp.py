"""`al mcp serve` through the SDK's own client over stdio: it lists the tools and resources,
answers without a scheduler from the store, and runs an agent through a real scheduler."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

TOOLS = {
    "al_status", "al_agents", "al_runs", "al_logs", "al_run", "al_kill", "al_pause",
    "al_resume", "al_state", "al_approve", "al_deny", "al_start", "al_stop",
}  # fmt: skip

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo task: {{ payload.prompt }}" } }]

[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = "did {{ payload.prompt }}" } }]

[[turns]]
text = "Finished."
"""


def connect(project: Any, check: Callable[[Any], Awaitable[Any]], *options: str) -> Any:
    """Start `al mcp serve` for ``project`` as the SDK's stdio client does; run ``check``."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "llamaherd", "--project", str(project.root), "mcp", "serve", *options],
        env={**os.environ, **getattr(project, "env", {})},
    )

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=120, cache=None) as client:
            return await check(client)

    return anyio.run(main)


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if hasattr(block, "text"))


def data(result: Any) -> Any:
    assert not result.is_error, text(result)
    return result.structured_content or json.loads(text(result))


@pytest.fixture
def offline(offline_project):
    offline_project.add_scripted_agent("greeter", script=SCRIPT)
    return offline_project


def test_the_client_lists_every_tool_and_resource(tmp_project):
    tmp_project.config("[gateway]\nport = 0\n")
    tmp_project.add_agent("a", "")

    async def check(client: Any) -> Any:
        tools = await client.list_tools()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        return tools, resources, templates

    tools, resources, templates = connect(tmp_project, check)
    assert {tool.name for tool in tools.tools} == TOOLS
    run = next(tool for tool in tools.tools if tool.name == "al_run")
    assert set(run.input_schema["properties"]) == {"agent", "prompt", "wait", "timeout"}
    assert run.input_schema["required"] == ["agent"]
    assert {str(r.uri) for r in resources.resources} == {"al://agents", "al://runs"}
    assert {t.uri_template for t in templates.resource_templates} == {
        "al://agents/{name}", "al://agents/{name}/skill", "al://runs/{run_id}",
    }  # fmt: skip


def test_without_a_scheduler_reads_come_from_the_store(offline):
    async def check(client: Any) -> Any:
        status = data(await client.call_tool("al_status", {}))
        refused = await client.call_tool("al_run", {"agent": "greeter"})
        paused = await client.call_tool("al_pause", {"name": "greeter"})
        state = data(await client.call_tool("al_state", {"agent": "greeter"}))
        skill = await client.read_resource("al://agents/greeter/skill")
        unknown = await client.call_tool("al_logs", {"target": "nobody"})
        return status, refused, paused, state, skill, unknown

    status, refused, paused, state, skill, unknown = connect(offline, check)
    assert status["scheduler"] == {"running": False}
    assert "store" in status["source"]
    assert [row["agent"] for row in status["agents"]] == ["greeter"]
    assert refused.is_error and "no scheduler is running" in text(refused)
    assert text(paused) == "paused greeter"
    assert state["state"] == "idle" and state["shown"] == "paused"
    assert skill.contents[0].text == "Do the thing."
    assert unknown.is_error and "no such run or agent 'nobody'" in text(unknown)


def test_an_agent_runs_through_mcp_with_a_prompt(offline, scheduler):
    running = scheduler(offline)

    async def check(client: Any) -> Any:
        status = data(await client.call_tool("al_status", {}))
        done = data(
            await client.call_tool(
                "al_run",
                {"agent": "greeter", "prompt": "water the plants", "wait": True, "timeout": 120},
            )
        )
        runs = data(await client.call_tool("al_runs", {"agent": "greeter"}))
        logs = text(await client.call_tool("al_logs", {"target": "greeter"}))
        detail = json.loads(
            (await client.read_resource(f"al://runs/{done['run']}")).contents[0].text
        )
        hibernated = data(
            await client.call_tool("al_state", {"agent": "greeter", "state": "hibernate"})
        )
        return status, done, runs, logs, detail, hibernated

    status, done, runs, logs, detail, hibernated = connect(offline, check)
    assert status["scheduler"]["running"] is True
    assert status["source"] == f"scheduler pid {running.proc.pid}"
    assert done["state"] == "done" and done["exit_code"] == 0
    assert done["return_value"] == "did water the plants"
    assert "task: water the plants" in done["log"]
    assert runs["runs"][0]["id"] == done["run"]
    assert runs["runs"][0]["trigger"]["payload"] == {"prompt": "water the plants"}
    assert f"run {done['run']} of greeter: done (exit 0)" in logs
    assert "tool_call: bash" in logs
    assert detail["run"]["id"] == done["run"]
    assert {e["type"] for e in detail["events"]} >= {"state", "tool_call", "model_call"}
    assert hibernated["state"] == "hibernate" and hibernated["previous"] == "idle"


def test_serve_with_an_environment_runs_the_project_as_it_layers_it(offline, tmp_path):
    """`al mcp serve -E staging`, as Action Llama's: its settings over the project's, for the
    scheduler it starts too."""
    if offline.fakes:
        pytest.skip("needs the scripted provider (its script key)")
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "staging.toml").write_text('[models.scripted]\nscript = "staging.toml"\n')
    offline.write("agents/greeter/staging.toml", SCRIPT.replace("did ", "staged "))
    offline.env["AL_ENVIRONMENTS_DIR"] = str(envs)

    async def check(client: Any) -> Any:
        started = text(await client.call_tool("al_start", {}))
        arguments = {"agent": "greeter", "prompt": "x", "wait": True, "timeout": 120}
        done = data(await client.call_tool("al_run", arguments))
        stopped = text(await client.call_tool("al_stop", {}))
        return started, done, stopped

    started, done, stopped = connect(offline, check, "-E", "staging")
    assert started.startswith("scheduler started")
    assert done["return_value"] == "staged x"
    assert "is stopping" in stopped


def test_init_writes_the_project_mcp_json_and_keeps_other_servers(tmp_project, al):
    tmp_project.config("")
    (tmp_project.root / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"other": {"command": "x"}}})
    )
    result = al("mcp", "init", cwd=tmp_project.root)
    assert result.returncode == 0, result.stderr
    config = json.loads((tmp_project.root / ".mcp.json").read_text())
    assert config["mcpServers"] == {
        "other": {"command": "x"},
        "llamaherd": {"command": "al", "args": ["mcp", "serve"]},
    }
    printed = json.loads(al("mcp", "init", "--print", cwd=tmp_project.root).stdout)
    entry = printed["mcpServers"]["llamaherd"]
    assert os.path.isabs(entry["command"]) and entry["command"].endswith("al")
    assert entry["args"] == ["--project", str(tmp_project.root), "mcp", "serve"]


@pytest.mark.parametrize("name", ["", "two words", "x" * 65, "a/b"])
def test_init_refuses_a_name_no_client_takes(tmp_project, al, name):
    tmp_project.config("")
    result = al("mcp", "init", "--name", name, cwd=tmp_project.root)
    assert result.returncode == 2 and "--name" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_project.root / ".mcp.json").exists()


def test_init_refuses_a_broken_mcp_json(tmp_project, al):
    tmp_project.config("")
    (tmp_project.root / ".mcp.json").write_text("{not json")
    result = al("mcp", "init", cwd=tmp_project.root)
    assert result.returncode == 2 and "not valid JSON" in result.stderr
    assert (tmp_project.root / ".mcp.json").read_text() == "{not json"

"""The scripted provider: script parsing, templating, turn selection, default behaviour."""

from __future__ import annotations

import pytest

from llamaherd.api import ConfigError, Message, ModelConfig, ToolCall, ToolSpec
from llamaherd.plugins import registry

TOOLS = [ToolSpec(n, n, {"type": "object"}) for n in ("bash", "set_status", "return_value")]
MODEL = ModelConfig(name="scripted", provider="scripted", model="scripted")


def provider():
    return registry().providers["scripted"]


def options(agent_dir, **kw):
    trigger = kw.pop("trigger", {"kind": "manual", "payload": {}, "source": None})
    return {
        "agent_dir": str(agent_dir),
        "params": kw.pop("params", {}),
        "trigger": trigger,
        "run_id": "r1",
        **kw,
    }


def run(agent_dir, opts=None, tools=TOOLS, results=None, limit=20):
    """Drive the provider like a session: answer each tool call from ``results`` (or echo)."""
    opts = opts or options(agent_dir)
    messages = [Message("system", "sys"), Message("user", "go")]
    replies = []
    for _ in range(limit):
        reply = provider().complete(messages, tools, MODEL, opts)
        replies.append(reply)
        messages.append(Message("assistant", reply.text, reply.tool_calls))
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            output = results(call) if results else f"ran {call.arguments}"
            messages.append(Message("tool", output, tool_call_id=call.id))
    return replies


def write(path, text):
    (path / "script.toml").write_text(text)


def test_registered_without_credential():
    assert provider().credential_type is None
    assert "script" in provider().schema


def test_default_reports_trigger_then_returns_then_answers(tmp_path):
    trigger = {
        "kind": "webhook",
        "source": "github",
        "payload": {"event": "issues", "action": "opened", "number": 7},
    }
    replies = run(tmp_path / "triage", options(tmp_path / "triage", trigger=trigger))
    calls = [(c.name, c.arguments) for r in replies for c in r.tool_calls]
    assert calls == [
        (
            "set_status",
            {"text": "received webhook trigger from github event=issues action=opened number=7"},
        ),
        ("return_value", {"value": "triage handled a webhook trigger"}),
    ]
    assert replies[-1].text == "Done: triage handled a webhook trigger." and len(replies) == 3


def test_default_skips_tools_not_offered(tmp_path):
    replies = run(tmp_path, tools=[ToolSpec("bash", "", {})])
    assert len(replies) == 1 and replies[0].text.startswith("Done:")


def test_script_turns_with_templates(tmp_path):
    write(
        tmp_path,
        """
[[turns]]
tool_calls = [
  { name = "bash", arguments = { command = "echo {{ payload.issue.number }} {{params.repo}} {{ trigger.kind }}" } },
  { name = "bash", arguments = { command = "echo {{ payload.labels.0 }}/{{ payload.missing.x }}/{{ turn }}" } },
]
[[turns]]
tool_calls = [{ name = "set_status", arguments = { text = "last: {{ last_result }}" } }]
[[turns]]
text = "payload was {{ payload.issue }}"
""",
    )
    opts = options(
        tmp_path,
        params={"repo": "o/r"},
        trigger={"kind": "webhook", "payload": {"issue": {"number": 5}, "labels": ["bug"]}},
    )
    replies = run(tmp_path, opts, results=lambda call: str(call.arguments).upper())
    assert [c.arguments for c in replies[0].tool_calls] == [
        {"command": "echo 5 o/r webhook"},
        {"command": "echo bug//1"},
    ]
    assert replies[0].tool_calls[0].id != replies[0].tool_calls[1].id
    assert replies[1].tool_calls[0].arguments == {"text": "last: {'COMMAND': 'ECHO BUG//1'}"}
    assert replies[2].text == 'payload was {"number": 5}' and replies[2].tool_calls == []


def test_turn_follows_the_transcript_so_a_resume_continues(tmp_path):
    write(tmp_path, '[[turns]]\ntext = "one"\n[[turns]]\ntext = "two"\n')
    history = [Message("user", "go"), Message("assistant", "one")]
    assert provider().complete(history, [], MODEL, options(tmp_path)).text == "two"
    history.append(Message("assistant", "two"))
    assert provider().complete(history, [], MODEL, options(tmp_path)).text == "Script finished."


def test_repeat_and_loop(tmp_path):
    write(
        tmp_path,
        """
[[turns]]
repeat = 2
tool_calls = [{ name = "bash", arguments = { command = "echo {{ turn }}" } }]
[[turns]]
loop = true
tool_calls = [{ name = "bash", arguments = { command = "sleep 0" } }]
""",
    )
    replies = run(tmp_path, limit=6)
    assert [r.tool_calls[0].arguments["command"] for r in replies] == [
        "echo 1",
        "echo 2",
        "sleep 0",
        "sleep 0",
        "sleep 0",
        "sleep 0",
    ]


def test_usage_is_estimated(tmp_path):
    write(tmp_path, '[[turns]]\ntext = "abcdefgh"\n')
    reply = provider().complete([Message("user", "x" * 40)], [], MODEL, options(tmp_path))
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 2)


def test_script_named_in_model_table(tmp_path):
    (tmp_path / "other.toml").write_text('[[turns]]\ntext = "from other"\n')
    model = ModelConfig(name="s", provider="scripted", model="s", extra={"script": "other.toml"})
    assert provider().complete([], [], model, options(tmp_path)).text == "from other"
    missing = ModelConfig(name="s", provider="scripted", model="s", extra={"script": "nope.toml"})
    with pytest.raises(ConfigError, match="nope.toml"):
        provider().complete([], [], missing, options(tmp_path))


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("[[turns]\n", "", "invalid TOML"),
        ("title = 1\n", "title", "unknown key"),
        ("[[turns]]\ntxt = 'x'\n", "turns[0].txt", "did you mean 'text'"),
        ("turns = []\n", "turns", "one or more"),
        ("[[turns]]\nrepeat = 2\n", "turns[0]", "text"),
        ("[[turns]]\ntext = 'x'\nrepeat = 0\n", "turns[0].repeat", "positive integer"),
        ("[[turns]]\ntext = 'x'\nloop = 'yes'\n", "turns[0].loop", "true or false"),
        (
            "[[turns]]\ntext = 'a'\nloop = true\n[[turns]]\ntext = 'b'\n",
            "turns[0].loop",
            "last turn",
        ),
        ("[[turns]]\ntool_calls = 'bash'\n", "turns[0].tool_calls", "list"),
        (
            "[[turns]]\ntool_calls = [{ arguments = {} }]\n",
            "turns[0].tool_calls[0].name",
            "tool name",
        ),
        (
            "[[turns]]\ntool_calls = [{ name = 'bash', arguments = 'ls' }]\n",
            "turns[0].tool_calls[0].arguments",
            "table",
        ),
        (
            "[[turns]]\ntool_calls = [{ name = 'bash', arguments = { command = '{{ secrets.x }}' } }]\n",
            "turns[0].tool_calls[0].arguments.command",
            "unknown template variable 'secrets.x'",
        ),
        ("[[turns]]\ntext = '{{ payload..x }}'\n", "turns[0].text", "unknown template variable"),
    ],
)
def test_bad_script_names_file_and_key(tmp_path, text, key, message):
    write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        provider().complete([], TOOLS, MODEL, options(tmp_path))
    assert err.value.file == str(tmp_path / "script.toml")
    assert err.value.key == key and message in err.value.message


def test_tool_calls_are_real_tool_call_objects(tmp_path):
    write(tmp_path, '[[turns]]\ntool_calls = [{ name = "bash", arguments = { command = "ls" } }]\n')
    reply = provider().complete([], TOOLS, MODEL, options(tmp_path))
    assert reply.tool_calls == [ToolCall("call_1_1", "bash", {"command": "ls"})]
    assert reply.stop_reason == "tool_use"


@pytest.mark.parametrize("what", ["a directory", "a FIFO", "a dangling link"])
def test_a_script_that_is_not_a_regular_file_is_refused(tmp_path, what):
    import os

    script = tmp_path / "script.toml"
    if what == "a directory":
        script.mkdir()
    elif what == "a FIFO":
        os.mkfifo(script)
    else:
        script.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(ConfigError) as err:  # never "no script": the default behaviour
        provider().complete([], TOOLS, MODEL, options(tmp_path))
    assert err.value.file == str(script)
    expected = "No such file" if what == "a dangling link" else f"not a regular file ({what})"
    assert expected in err.value.message


def test_al_run_of_an_agent_whose_script_is_a_directory_fails_naming_it(offline_project):
    offline_project.add_scripted_agent("worker")
    (offline_project.root / "agents/worker/script.toml").mkdir()
    result = offline_project.al("run", "worker")
    assert result.returncode != 0, result.stdout
    shown = result.stdout + result.stderr
    assert "agents/worker/script.toml" in shown and "not a regular file (a directory)" in shown
    assert "Traceback" not in shown

"""The parts of agent tests on their own: matching, cassettes (normalising, comparing, the
file), the tape's modes at the provider contract, expectations, case files and reports."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest

from llamaherd import hookimpl
from llamaherd.agent_tests.cassette import Cassette, Substitutions, difference, digest
from llamaherd.agent_tests.expectations import matches
from llamaherd.agent_tests.tape import CassetteMismatch, Fork, Tape
from llamaherd.api import CaseRun, Message, ModelConfig, Reply, ToolSpec, Unmet
from llamaherd.errors import ConfigError

# ------------------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    ("expected", "actual", "met"),
    [
        ({"a": 1}, {"a": 1, "b": 2}, True),  # a table names what it checks
        ({"a": 1, "c": 3}, {"a": 1}, False),
        ([1, 2], [1, 2], True),
        ([1, 2], [1, 2, 3], False),  # an array is the whole array
        ({"regex": r"^gh pr \d+$"}, "gh pr 7", True),
        ({"glob": "gh pr *"}, "gh pr edit 7", True),
        ({"glob": "gh pr *"}, "git push", False),
        ({"contains": "bug"}, "labels: bug", True),
        ({"contains": "bug"}, 7, False),
        (True, 1, False),  # JSON true is not 1
        (1, 1.0, True),
        ({"label": {"glob": "b*"}}, {"label": "bug"}, True),
    ],
)
def test_matching_rules(expected, actual, met):
    assert matches(expected, actual) is met


# ------------------------------------------------------------------------------ cassettes


def _request(system="sys", messages=(), tools=("bash",), model="m"):
    return {
        "model": {"name": model, "provider": "openai", "model": f"{model}-id"},
        "system": system,
        "tools": [{"name": t, "description": t, "parameters": {}} for t in tools],
        "messages": list(messages),
    }


def test_substitutions_put_the_longest_value_first_and_back():
    values = Substitutions({"workdir": "/tmp/al-runs/a-1", "run_id": "a-1"})
    normal = values.normalise({"x": ["cd /tmp/al-runs/a-1 && echo a-1"]})
    assert normal == {"x": ["cd {{al.workdir}} && echo {{al.run_id}}"]}
    other = Substitutions({"workdir": "/tmp/al-runs/b-2", "run_id": "b-2"})
    assert other.denormalise(normal) == {"x": ["cd /tmp/al-runs/b-2 && echo b-2"]}


def test_a_cassette_keeps_each_turns_new_messages_and_rebuilds_its_requests(tmp_path):
    user = {"role": "user", "content": "go"}
    first = {
        "text": "",
        "tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}],
    }
    result = {"role": "tool", "content": "a.txt", "tool_call_id": "c1"}
    cassette = Cassette("agent")
    cassette.add(_request(messages=[user]), {"name": "m"}, first)
    assistant = {"role": "assistant", "content": "", "tool_calls": first["tool_calls"]}
    second = _request(messages=[user, assistant, result])
    cassette.add(second, {"name": "m"}, {"text": "done", "tool_calls": []})
    assert cassette.turns[1]["messages"] == [result], "only what is new since the last request"
    path = tmp_path / "c.cassette.json"
    cassette.save(path)
    loaded = Cassette.load(path)
    assert loaded.request(2)["messages"] == second["messages"]
    assert loaded.turns[1]["digest"] == digest(second)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "invalid JSON"),
        ('{"format": "other"}', 'expected "llamaherd-cassette/1"'),
        (
            '{"format": "llamaherd-cassette/1", "turns": [{"messages": [], "reply": {"tool_calls": 5}}]}',
            "malformed",
        ),
        ('{"format": "llamaherd-cassette/1", "turns": [1]}', "expected a list of"),
    ],
)
def test_a_broken_cassette_is_one_line_naming_the_file(tmp_path, text, why):
    path = tmp_path / "x.cassette.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        Cassette.load(path)
    assert str(path) in str(caught.value) and why in str(caught.value)


def test_difference_names_the_part_that_changed():
    before = _request(messages=[{"role": "user", "content": "line one\nline two"}])
    assert difference(before, before) == []
    changed = difference(before, _request(system="sys 2", messages=before["messages"]))
    assert changed[0] == "the system prompt changed:" and "    -sys" in changed
    tools = difference(before, _request(tools=("bash", "read"), messages=before["messages"]))
    assert tools == ["the tools changed: added read"]
    other = difference(before, _request(messages=[{"role": "user", "content": "line one\nline 2"}]))
    assert other[0] == "message 1 (a user message) changed:" and "    +line 2" in other
    model = difference(before, _request(model="n", messages=before["messages"]))
    assert model == ["the model: recorded from m (openai m-id), now n (openai n-id)"]


def test_prompt_matching_and_ignored_patterns():
    user = {"role": "user", "content": "at 2024-01-01T10:00:00Z"}
    before = _request(messages=[user, {"role": "tool", "content": "1", "tool_call_id": "a"}])
    after = _request(messages=[user, {"role": "tool", "content": "2", "tool_call_id": "a"}])
    assert difference(before, after) != []
    assert difference(before, after, "prompt") == [], "prompt: only up to the first user message"
    later = _request(messages=[{"role": "user", "content": "at 2025-06-30T23:59:59Z"}])
    stamp = [re.compile(r"\d{4}-\d\d-\d\dT[\d:]+Z")]
    assert difference(_request(messages=[user]), later, ignore=stamp) == []


# ------------------------------------------------------------------------------ the tape


class Live:
    """A provider standing in for a real one: counts what it is asked."""

    name = "live"
    credential_type = None

    def __init__(self) -> None:
        self.asked: list[list[Message]] = []

    def complete(self, messages, tools, model, options):
        self.asked.append(list(messages))
        return Reply(text=f"live {len(self.asked)}")


MODEL = ModelConfig(name="m", provider="live", model="m-id")
TOOLS = [ToolSpec("bash", "bash", {})]


def _turns(tape: Tape, provider: Live, contents: list[str]) -> list[Reply]:
    messages = [Message("system", "sys"), Message("user", "go")]
    replies = []
    for content in contents:
        reply = tape.complete(provider, messages, TOOLS, MODEL, {"run_id": "r"})
        replies.append(reply)
        messages += [Message("assistant", reply.text, reply.tool_calls), Message("user", content)]
    return replies


def _recorded(texts: list[str]) -> Cassette:
    tape = Tape("live")
    provider = Live()
    provider.complete = lambda m, t, mo, o, texts=iter(texts): Reply(text=next(texts))  # type: ignore[method-assign]
    _turns(tape, provider, ["a", "b", "c"][: len(texts)])
    return tape.played


def test_replay_answers_from_the_cassette_and_never_asks_the_provider():
    recorded = _recorded(["one", "two"])
    provider = Live()
    tape = Tape("replay", recorded)
    assert [r.text for r in _turns(tape, provider, ["a", "b"])] == ["one", "two"]
    assert provider.asked == [] and tape.sources == ["cassette", "cassette"]


def test_replay_stops_at_the_first_differing_turn_and_says_why():
    tape = Tape("replay", _recorded(["one", "two"]))
    with pytest.raises(CassetteMismatch, match="turn 2 differs"):
        _turns(tape, Live(), ["changed", "b"])
    assert tape.mismatch[0] == "turn 2 differs from the recording:"
    assert "message 3 (a user message) changed:" in tape.mismatch[1]


def test_update_plays_the_matching_turns_then_asks_the_live_model():
    provider = Live()
    tape = Tape("update", _recorded(["one", "two", "three"]))
    replies = _turns(tape, provider, ["a", "changed", "c"])
    assert [r.text for r in replies] == ["one", "two", "live 1"]
    assert tape.live_from == 3 and tape.sources == ["cassette", "cassette", "live"]
    assert [t["reply"]["text"] for t in tape.played.turns] == ["one", "two", "live 1"]


def test_a_fork_shows_the_live_model_the_recorded_checkpoint():
    recorded = _recorded(["one", "two"])
    checkpoint = recorded.request(2)["messages"]
    provider = Live()
    tape = Tape("replay", recorded, fork=Fork(1, checkpoint))
    messages = [Message("system", "sys now"), Message("user", "go")]
    first = tape.complete(provider, messages, TOOLS, MODEL, {"run_id": "r"})
    messages += [Message("assistant", first.text), Message("user", "this run's own result")]
    tape.complete(provider, messages, TOOLS, MODEL, {"run_id": "r"})
    [asked] = provider.asked
    assert [m.content for m in asked] == ["sys now", "go", "one", "a"], "the recorded result"


# ------------------------------------------------------------------------------ expectations


def _run(**fields):
    base = {"run_id": "r", "agent": "a", "state": "done", "exit_code": 0}
    return CaseRun(**{**base, **fields})


def _check(registry, name, expected, run):
    return registry.expectations[name].check(expected, run)


def test_commands_are_met_in_order_and_the_closest_is_shown():
    from llamaherd.plugins import registry

    run = _run(
        commands=[
            {"phase": "pre", "command": "git clone --depth 2 x", "exit_code": 0, "output": ""},
            {"phase": "bash", "command": "make test", "exit_code": 1, "output": "FAILED"},
        ]
    )
    assert _check(registry(), "commands", [{"command": "make test", "exit_code": 1}], run) == []
    [unmet] = _check(registry(), "commands", [{"command": "git clone --depth 1 x"}], run)
    assert unmet.item == 0 and unmet.details[:3] == [
        "closest:",
        "  - git clone --depth 1 x",
        "  + git clone --depth 2 x",
    ]
    [late] = _check(
        registry(), "commands", [{"command": "make test"}, {"command": {"glob": "git *"}}], run
    )
    assert "it came earlier" in late.message and late.item == 1
    [forbidden] = _check(registry(), "no_commands", [{"command": {"glob": "make *"}}], run)
    assert forbidden.message.startswith("expected no command like")


def test_spend_expectations_refuse_an_unknown_price():
    from llamaherd.plugins import registry

    run = _run(turns=3, input_tokens=900, output_tokens=200, cost_usd=0.02, unpriced_turns=1)
    assert _check(registry(), "max_turns", 3, run) == []
    [tokens] = _check(registry(), "max_tokens", 1000, run)
    assert tokens.message == "expected at most 1000, the run took 1100"
    [cost] = _check(registry(), "max_cost_usd", 1.0, run)
    assert "price of 1 turn(s) is unknown" in cost.message


class Audit:
    """A plugin's expectation: every command the run ran exited 0."""

    name = "clean_exits"
    description = "Every command exited 0."
    schema = {"type": "boolean"}

    def check(self, expected, run):
        bad = [c for c in run.commands if c["exit_code"] not in (0, None)]
        return (
            [Unmet(f"{len(bad)} command(s) failed", [c["command"] for c in bad])]
            if expected and bad
            else []
        )


class AuditPlugin:
    @hookimpl
    def register_expectations(self, register):
        register(Audit())


def test_a_plugins_expectation_joins_the_case_schema(registered_plugin, tmp_path):
    from llamaherd.agent_tests.cases import case_schema, load_case

    reg = registered_plugin(AuditPlugin(), "audit")
    assert reg.owner[("expectations", "clean_exits")] == "audit"
    assert (
        case_schema(reg)["properties"]["expect"]["properties"]["clean_exits"]["type"] == "boolean"
    )
    path = tmp_path / "c.toml"
    path.write_text('[trigger]\nkind = "manual"\n[expect]\nclean_exits = true\n')
    assert load_case(path, "a", reg).expect == {"clean_exits": True}
    path.write_text('[trigger]\nkind = "manual"\n[expect]\nclean_exits = "yes"\n')
    with pytest.raises(ConfigError, match=r"expect\.clean_exits: expected true or false"):
        load_case(path, "a", reg)
    failing = _run(commands=[{"phase": "bash", "command": "false", "exit_code": 1}])
    assert _check(reg, "clean_exits", True, failing)[0].details == ["false"]


# ------------------------------------------------------------------------------ case files


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            '[trigger]\nkind = "manual"\n[expect]\nmax_turns = -1\n',
            "expect.max_turns: expected a number >= 0",
        ),
        (
            '[trigger]\nkind = "manual"\n[expect]\nmax_cost_usd = nan\n',
            "expect.max_cost_usd: expected a finite",
        ),
        (
            '[trigger]\nkind = "manual"\n[model]\nignore = ["("]\n',
            "model.ignore[0]: not a regular expression",
        ),
        (
            '[trigger]\nkind = "webhook"\npayload = "missing.json"\n',
            "trigger.payload: no such file",
        ),
        ('[trigger]\nkind = "manual"\n[credentials]\n"../x" = { a = "b" }\n', "credentials.../x"),
        (
            '[trigger]\nkind = "manual"\n[model]\nmatch = "all"\n',
            'model.match: expected one of "prompt", "request"',
        ),
        ("[expect]\n", "trigger: missing (required)"),
    ],
)
def test_a_case_file_problem_names_the_file_and_key(tmp_path, text, where):
    from llamaherd.agent_tests.cases import load_case
    from llamaherd.plugins import registry

    path = tmp_path / "case.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_case(path, "a", registry())
    assert str(caught.value).startswith(f"{path}: ") and where in str(caught.value)


def test_a_payload_file_past_the_bound_is_refused(tmp_path, monkeypatch):
    from llamaherd.agent_tests import cases

    monkeypatch.setattr(cases, "MAX_PAYLOAD", 64)
    (tmp_path / "big.json").write_text(json.dumps({"x": "y" * 100}))
    path = tmp_path / "case.toml"
    path.write_text('[trigger]\nkind = "webhook"\npayload = "big.json"\n')
    with pytest.raises(ConfigError, match=r"trigger\.payload: big\.json: .*at most 64"):
        cases.load_case(path, "a", SimpleNamespace(expectations={}))


# ------------------------------------------------------------------------------ reports


def test_junit_lists_each_case_with_its_failure(tmp_path):
    from llamaherd.agent_tests.cases import Case
    from llamaherd.agent_tests.execute import CaseResult, Failure
    from llamaherd.agent_tests.report import Report, junit, session_dict

    case = Case(tmp_path / "agents/a/tests/one.toml", "a", {"kind": "manual"})
    report = Report(
        results=[
            CaseResult(case, "passed", 0.5),
            CaseResult(
                case,
                "failed",
                0.7,
                [Failure("expect.state", 'expected "done", got "error"', ["x"])],
            ),
        ],
        errors=[ConfigError(str(tmp_path / "agents/a/tests/bad.toml"), "expect.x", "unknown key")],
        repeat=2,
    )
    suites = ET.fromstring(junit(report, tmp_path))
    assert (suites.get("tests"), suites.get("failures"), suites.get("errors")) == ("3", "1", "1")
    names = [c.get("name") for c in suites.iter("testcase")]
    assert names == ["one[1]", "one[2]", "agents/a/tests/bad.toml"]
    failure = suites.find(".//failure")
    assert failure.get("message") == 'expect.state: expected "done", got "error"'
    found = session_dict(report, tmp_path)
    assert found["exit_code"] == 2 and found["repeat"][0]["pass_rate"] == 0.5


def test_record_proposes_globs_for_a_runs_own_values():
    from llamaherd.agent_tests.record import _Stable

    stable = _Stable(Substitutions({"workdir": "/tmp/al-runs/a-1*x", "run_id": "a-1"}))
    assert stable({"v": "in /tmp/al-runs/a-1*x [ok]", "n": 3}) == {
        "v": {"glob": "in * [[]ok]"},
        "n": 3,
    }
    assert stable("plain") == "plain"


def test_tool_calls_in_order():
    from llamaherd.plugins import registry

    calls = [
        {
            "turn": 1,
            "name": "bash",
            "arguments": {"command": "ls"},
            "result": "a",
            "is_error": False,
        }
    ]
    run = _run(tool_calls=calls)
    assert (
        _check(registry(), "tool_calls", [{"name": "bash", "arguments": {"command": "ls"}}], run)
        == []
    )
    [unmet] = _check(registry(), "tool_calls", [{"name": "write"}], run)
    assert "turn 1: bash" in "\n".join(unmet.details)

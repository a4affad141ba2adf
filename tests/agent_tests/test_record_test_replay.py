"""The issue's acceptance, through real `al` processes, real host-user sandboxes and a fake
OpenAI-compatible model on 127.0.0.1: a webhook agent's run recorded as a test case, tested
with no model server running, broken by a hook and by SKILL.md, recorded again, replayed
against another model and forked from one of its turns."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from llamaherd.testing import chat_reply

from .conftest import PR_OPENED, add_model, run_once

TRIAGER = """\
webhooks = [{ source = "github", events = ["pull_request"], actions = ["opened"] }]

[hooks]
pre = ["echo 'labels: bug, flaky' > labels.txt"]
"""
# What the model answers the triager: read the labels, return one, say so.
ANSWERS = (
    chat_reply(tool_calls=[("bash", {"command": "cat labels.txt"})]),
    chat_reply(tool_calls=[("return_value", {"value": {"label": "bug", "number": 7}})]),
    chat_reply("Labelled pull request 7 as a bug."),
)


def recorded_triager(project, scheduler, fake_model, name="pr-opened"):
    """The triager run once by a delivery against a fake model, then `al record`."""
    model = fake_model(*ANSWERS)
    add_model(project, "fake", model)
    project.add_scripted_agent("triager", 'models = ["fake"]\n' + TRIAGER)
    run = run_once(project, scheduler, "triager", PR_OPENED)
    assert run.state == "done", run.reason
    assert len(model.requests) == 3
    recorded = project.al("record", run.id, "--name", name)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    return model, run


def test_a_recorded_webhook_run_passes_al_test_with_no_model_server(project, scheduler, fake_model):
    model, run = recorded_triager(project, scheduler, fake_model)
    tests = project.root / "agents" / "triager" / "tests"
    case = (tests / "pr-opened.toml").read_text()
    assert (
        'kind = "webhook"' in case
        and 'source = "github"' in case
        and 'event = "pull_request"' in case
    )
    assert "command = \"echo 'labels: bug, flaky' > labels.txt\"" in case
    assert json.loads((tests / "pr-opened.payload.json").read_text()) == PR_OPENED
    cassette = json.loads((tests / "pr-opened.cassette.json").read_text())
    assert len(cassette["turns"]) == 3 and cassette["recorded"]["from"] == f"run {run.id}"
    assert run.id not in json.dumps(cassette["turns"]), "the run's own id is a placeholder"

    model.stop()  # nothing answers at the model's address any more
    tested = project.al("test", "--json")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    [result] = json.loads(tested.stdout)["cases"]
    assert result["id"] == "triager/pr-opened" and result["outcome"] == "passed"
    assert result["model"]["turns"] == ["cassette"] * 3
    assert result["run"]["return_value"] == {"label": "bug", "number": 7}
    assert len(model.requests) == 3, "no request reached a model"


def test_a_changed_hook_fails_naming_the_expectation_with_junit(project, scheduler, fake_model):
    model, _ = recorded_triager(project, scheduler, fake_model)
    model.stop()
    config = project.root / "agents" / "triager" / "config.toml"
    config.write_text(config.read_text().replace("labels: bug, flaky", "labels: feature"))
    junit = project.root / "junit.xml"

    tested = project.al("test", "triager", "--junit", str(junit))
    assert tested.returncode == 1, tested.stdout + tested.stderr
    out = tested.stdout
    assert "FAILED triager/pr-opened" in out
    assert "expect.commands[0]: no command like" in out
    assert "- echo 'labels: bug, flaky' > labels.txt" in out
    assert "+ echo 'labels: feature' > labels.txt" in out
    assert "0 passed, 1 failed" in out

    suites = ET.parse(junit).getroot()
    assert suites.get("tests") == "1" and suites.get("failures") == "1"
    [case] = suites.iter("testcase")
    assert case.get("classname") == "triager" and case.get("name") == "pr-opened"
    failure = case.find("failure")
    assert failure is not None and "expect.commands[0]" in failure.text


def test_a_changed_skill_names_the_first_differing_turn_and_update_records_again(
    project, scheduler, fake_model
):
    model, _ = recorded_triager(project, scheduler, fake_model)
    model.stop()
    skill = project.root / "agents" / "triager" / "SKILL.md"
    skill.write_text(skill.read_text().replace("Do the thing.", "Label pull requests carefully."))

    tested = project.al("test")
    assert tested.returncode == 1, tested.stdout + tested.stderr
    assert "cassette: pr-opened.cassette.json: turn 1 differs from the recording:" in tested.stdout
    assert "the system prompt changed:" in tested.stdout
    assert "-Do the thing." in tested.stdout and "+Label pull requests carefully." in tested.stdout

    # With the model up again, --update asks it from the first differing turn and passes.
    again = fake_model(*ANSWERS)
    config = project.root / "config.toml"
    config.write_text(config.read_text().replace(model.url, again.url))
    updated = project.al("test", "--update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "cassette recorded from turn 1: 3 turns" in updated.stdout
    assert len(again.requests) == 3
    assert "Label pull requests carefully." in again.requests[0]["body"]["messages"][0]["content"]
    again.stop()
    offline = project.al("test")
    assert offline.returncode == 0, offline.stdout + offline.stderr


def test_replay_with_another_model_shows_what_changed_side_by_side(project, scheduler, fake_model):
    model, run = recorded_triager(project, scheduler, fake_model)
    other = fake_model(
        chat_reply(tool_calls=[("bash", {"command": "echo 'looks like a question'"})]),
        chat_reply(tool_calls=[("return_value", {"value": {"label": "question", "number": 7}})]),
        chat_reply("Labelled it a question."),
    )
    add_model(project, "other", other)

    replayed = project.al("replay", run.id, "--model", "other", "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    found = json.loads(replayed.stdout)
    rows = {row["what"]: row for row in found["rows"]}
    assert rows["turn 1"]["differs"] and "cat labels.txt" in rows["turn 1"]["original"]
    assert "looks like a question" in rows["turn 1"]["replay"]
    assert rows["return value"]["differs"] and '"question"' in rows["return value"]["replay"]
    assert not rows["turns"]["differs"] and not rows["state"]["differs"]
    assert len(other.requests) == 3 and len(model.requests) == 3  # only the other model asked
    assert found["replay"]["id"] != run.id

    table = project.al("replay", run.id, "--model", "other")
    assert table.returncode == 0, table.stderr
    assert "ORIGINAL" in table.stdout and "REPLAY" in table.stdout
    assert "≠  return value" in table.stdout
    # Nothing of the replay stays in the project's store.
    store = project.store()
    try:
        assert [r.id for r in store.runs(limit=100)] == [run.id]
    finally:
        store.close()


FOUR_TURNS = (
    chat_reply(
        tool_calls=[("bash", {"command": "mkdir -p sub && echo one > sub/state.txt && cd sub"})]
    ),
    chat_reply(tool_calls=[("bash", {"command": "setenv STAGE two && echo staged"})]),
    chat_reply(tool_calls=[("bash", {"command": 'echo "stage=$STAGE"; cat state.txt; pwd'})]),
    chat_reply("All four turns done."),
)


def test_from_turn_forks_at_the_checkpoint_in_a_restored_sandbox(project, scheduler, fake_model):
    model = fake_model(*FOUR_TURNS)
    add_model(project, "fake", model)
    project.add_scripted_agent("stepper", 'models = ["fake"]\n')
    run = run_once(project, scheduler, "stepper")
    assert run.state == "done" and len(model.requests) == 4
    recorded = [m for m in run.transcript if m.get("role") == "tool"]

    live = fake_model(
        chat_reply(tool_calls=[("bash", {"command": 'echo "stage=$STAGE"; cat state.txt; pwd'})]),
        chat_reply("Forked and done."),
    )
    config = project.root / "config.toml"
    config.write_text(config.read_text().replace(model.url, live.url))
    forked = project.al("replay", run.id, "--from-turn", "2", "--json")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    found = json.loads(forked.stdout)

    assert len(live.requests) == 2, "turns 1 and 2 came from the recording, 3 and 4 live"
    first = live.requests[0]["body"]["messages"]
    assert [m["role"] for m in first] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    # The model resumes from the checkpoint: the first two turns' results as recorded.
    assert [m["content"] for m in first if m["role"] == "tool"] == [
        m["content"] for m in recorded[:2]
    ]
    # The fresh sandbox was restored: the file turn 1 wrote, its cwd, turn 2's setenv.
    third = live.requests[1]["body"]["messages"][-1]["content"]
    assert "stage=two" in third and "one" in third and third.rstrip().endswith("/sub")
    assert any("2 of 2 tool results as recorded" in note for note in found["notes"])
    assert any("turns 3-4 asked the live model" in note for note in found["notes"])
    assert found["replay"]["state"] == "done" and found["replay"]["turns"] == 4

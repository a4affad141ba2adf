"""The flow key language, and what `al validate`, `al prompt` and `al schema` say of `[flow]`
and `[budget]`."""

from __future__ import annotations

import json

import pytest

from llamaherd.flowkey import (
    ExpressionError,
    compile_expression,
    document,
    key_of,
    priority_of,
)

PR = {
    "action": "opened",
    "number": 7,
    "issue": {"number": 7, "labels": [{"name": "urgent"}]},
    "repository": {"full_name": "acme/widgets"},
}


def webhook(body):
    return document("webhook", {"source": "github", "source_type": "github", "event": "issues",
                                "repo": "acme/widgets", "delivery": "d-1", "payload": body},
                    source="github")  # fmt: skip


def test_keys_from_expressions_and_templates():
    doc = webhook(PR)
    assert key_of(compile_expression("issue.number"), doc) == "7"
    template = compile_expression("{repository.full_name}#{issue.number}")
    assert key_of(template, doc) == "acme/widgets#7"
    assert key_of(compile_expression("trigger.event"), doc) == "issues"
    assert key_of(compile_expression("trigger.delivery"), doc) == "d-1"
    assert key_of(compile_expression("{{literal}} {trigger.repo}"), doc) == "{literal} acme/widgets"
    assert key_of(compile_expression("missing.path"), doc) == "", "no value: the one empty key"
    assert key_of(compile_expression("issue.labels[].name"), doc) == '["urgent"]'
    long = key_of(compile_expression("trigger.x"), {"trigger": {"x": "y" * 500}})
    assert len(long) == 200 and "~" in long


def test_documents_of_other_triggers():
    manual = document("manual", {"pr": 3}, prompt="fix it", source="cli")
    assert key_of(compile_expression("pr"), manual) == "3"
    assert key_of(compile_expression("trigger.prompt"), manual) == "fix it"
    call = document("agent", {"context": "review #9", "caller_agent": "lead"}, source="lead")
    assert key_of(compile_expression("caller_agent"), call) == "lead"
    assert key_of(compile_expression("trigger.kind"), call) == "agent"


def test_priorities_are_numbers():
    doc = webhook(PR)
    urgent = compile_expression("issue.labels[?name=='urgent'] && `10` || `0`")
    assert priority_of(urgent, doc) == 10.0
    assert priority_of(urgent, webhook({"issue": {"labels": []}})) == 0.0
    assert priority_of(compile_expression("issue.number"), doc) == 7.0
    assert priority_of(compile_expression("repository.full_name"), doc) == 0.0
    assert priority_of(compile_expression("`1e99`"), doc) == 1e9


@pytest.mark.parametrize(
    "text, says",
    [
        ("pull_request.", "not a valid JMESPath expression"),
        ("{repository.full_name", "without its '}'"),
        ("{a} b}", "without its '{'"),
        ("a {} b", "empty {} placeholder"),
        ("{a[}", "not a valid JMESPath expression"),
        ("  ", "got nothing"),
    ],
)
def test_bad_expressions_say_what_is_wrong(text, says):
    with pytest.raises(ExpressionError, match=None) as caught:
        compile_expression(text)
    assert says in str(caught.value)


def test_validate_reports_flow_and_budget_problems(offline_project):
    offline_project.add_scripted_agent(
        "broken",
        '[flow]\nkey = "pull_request."\nsingleton = { mode = "skip" }\nconcurrency = { limit = 2 }\n',
    )
    offline_project.add_scripted_agent(
        "both", '[flow]\ndebounce = { period = "1m" }\nbatch = { maxSize = 5, timeout = "1m" }\n'
    )
    offline_project.add_scripted_agent("typo", '[flow]\nthrotle = { limit = 1, period = "1m" }\n')
    offline_project.add_scripted_agent("spend", "[budget]\ndaily = { dollars = 5 }\n")
    out = offline_project.al("validate")
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "agents/broken/config.toml: flow.key: 'pull_request.' is not a valid JMESPath" in text
    assert "agents/both/config.toml: flow.batch: set either debounce" in text
    assert "agents/typo/config.toml: flow.throtle" in text
    assert "agents/spend/config.toml: budget.daily" in text


def test_validate_warns_of_a_money_budget_over_an_unpriced_model(offline_project):
    path = offline_project.root / "config.toml"
    path.write_text(
        'timezone = "Mars/Olympus"\n' + path.read_text()
        + '\n[models.local]\nprovider = "openai"\nmodel = "my-own-model"\n'
        + 'base_url = "http://127.0.0.1:9/v1"\ncredential = "openai_key:none"\n'
    )  # fmt: skip
    offline_project.add_scripted_agent(
        "spender", 'models = ["local"]\n[budget]\ndaily = { usd = 5 }\n'
    )
    out = offline_project.al("validate")
    text = out.stdout + out.stderr
    assert "config.toml: timezone: unknown time zone 'Mars/Olympus'" in text
    assert (
        "warning: agents/spender/config.toml: budget: model local (my-own-model) has no known price"
        in text
    )


def test_prompt_shows_the_keys_a_payload_yields(offline_project, tmp_path):
    offline_project.write("config.toml", (offline_project.root / "config.toml").read_text()
                          + '\n[webhooks.github]\ntype = "github"\nallowUnsigned = true\n')  # fmt: skip
    offline_project.add_scripted_agent(
        "reviewer",
        'webhooks = [{ source = "github", events = ["issues"] }]\n[flow]\nkey = "{repository.full_name}#{issue.number}"\n'
        'singleton = { mode = "cancel" }\npriority = "issue.labels[?name==\'urgent\'] && `10` || `0`"\n',
    )
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"event": "issues", **PR}))
    out = offline_project.al(
        "prompt", "reviewer", "--trigger", "webhook", "--payload", str(payload), check=True
    )
    assert "=== flow ===\nconcurrency: 'acme/widgets#7'\npriority: 10" in out.stdout


def test_schema_documents_flow_and_budget(offline_project):
    agent = json.loads(offline_project.al("schema", "--agent", check=True).stdout)
    flow = agent["properties"]["flow"]["properties"]
    assert set(flow) == {
        "key",
        "singleton",
        "concurrency",
        "debounce",
        "throttle",
        "rateLimit",
        "batch",
        "priority",
    }
    project = json.loads(offline_project.al("schema", "--project", check=True).stdout)
    assert set(project["properties"]["budget"]["properties"]) == {"perRun", "daily", "monthly"}
    assert project["properties"]["timezone"]["default"] == "UTC"

"""A run traced end to end: a real scheduler exports over OTLP/HTTP to a collector stand-in on
127.0.0.1, which decodes the protobuf; the span tree and its attributes are checked."""

from __future__ import annotations

import json

import pytest

from llamaherd.testing import wait_until

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo traced" } }]

[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "exit 3" } }]

[[turns]]
text = "Done."
"""
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "300"}


def telemetry(collector, extra: str = "") -> str:
    return (
        f'\n[telemetry]\nenabled = true\nprovider = "otel"\nendpoint = "{collector.url}"\n'
        f'serviceName = "herd-test"\nheaders = {{ "x-api-key" = "k-123" }}\n{extra}'
    )


@pytest.fixture
def traced(offline_project, collector):
    config = offline_project.root / "config.toml"
    config.write_text(config.read_text() + telemetry(collector))
    offline_project.add_scripted_agent("greeter", script=SCRIPT)
    return offline_project


def test_the_collector_gets_the_span_tree_of_one_run(traced, collector, scheduler):
    scheduler(traced, env=FAST_EXPORT)
    result = traced.al("run", "greeter", "--no-follow")
    assert result.returncode == 0, result.stderr
    run = traced.wait_run(lambda runs: next((r for r in runs if r.state == "done"), None), 60)
    expected = {
        "run greeter": 1, "trigger manual": 1, "queue wait": 1, "sandbox start": 1,
        "model_call scripted": 3, "tool bash": 2,
    }  # fmt: skip

    def complete() -> list[dict]:
        spans = [s for s in collector.spans]
        names = [s["name"] for s in spans]
        return spans if all(names.count(n) == c for n, c in expected.items()) else []

    spans = wait_until(complete, 30, what="every span of the run at the collector")
    (root,) = [s for s in spans if s["name"] == "run greeter"]
    children = [s for s in spans if s is not root]
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}  # one trace
    assert root["parent"] == "" and all(s["parent"] == root["span_id"] for s in children)

    assert root["attributes"]["llamaherd.run_id"] == run.id
    assert root["attributes"]["llamaherd.agent"] == "greeter"
    assert root["attributes"]["llamaherd.run.state"] == "done"
    assert root["attributes"]["llamaherd.run.exit_code"] == 0
    assert root["attributes"]["agent.trigger_type"] == "manual"
    assert root["resource"]["service.name"] == "herd-test"
    by_name = {s["name"]: s for s in spans}
    queue, sandbox = by_name["queue wait"], by_name["sandbox start"]
    assert root["start"] <= queue["start"] <= queue["end"] <= sandbox["start"] <= sandbox["end"]
    assert sandbox["attributes"]["llamaherd.runtime"] == traced.runtime
    assert max(s["end"] for s in children) <= root["end"] + 1

    calls = sorted(
        (s for s in spans if s["name"] == "model_call scripted"), key=lambda s: s["start"]
    )
    for call in calls:
        attrs = call["attributes"]
        assert attrs["gen_ai.system"] == traced.provider
        assert attrs["gen_ai.request.model"] == "scripted"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["llamaherd.cost_usd"] == 0.0  # the offline provider's price table
    tools = sorted((s for s in spans if s["name"] == "tool bash"), key=lambda s: s["start"])
    assert [t["attributes"]["llamaherd.tool.command"] for t in tools] == ["echo traced", "exit 3"]
    assert [t["attributes"]["llamaherd.tool.exit_code"] for t in tools] == [0, 3]
    assert [t["status"] for t in tools] == [0, 2]  # unset, then ERROR for the failed command
    assert calls[0]["end"] <= tools[0]["start"] + 0.01

    # The headers of [telemetry] go with every export; the key is never in the scheduler log.
    assert all(h.get("x-api-key") == "k-123" for h in collector.headers_seen)


def test_run_metrics_reach_the_collector(traced, collector, scheduler):
    scheduler(traced, env=FAST_EXPORT)
    traced.al("run", "greeter", "--no-follow", check=True)
    traced.wait_run(lambda runs: any(r.state == "done" for r in runs), 60)

    def exported() -> dict:
        metrics = dict(collector.metrics)
        wanted = ("llamaherd.runs", "llamaherd.run.duration", "llamaherd.model.tokens")
        return metrics if all(m in metrics for m in wanted) else {}

    metrics = wait_until(exported, 30, what="run metrics at the collector")
    (runs,) = metrics["llamaherd.runs"]
    assert runs["value"] == 1
    assert runs["attributes"] == {
        "llamaherd.agent": "greeter",
        "llamaherd.run.state": "done",
        "llamaherd.trigger.kind": "manual",
    }
    tokens = {
        p["attributes"]["gen_ai.token.type"]: p["value"] for p in metrics["llamaherd.model.tokens"]
    }
    assert tokens["input"] > 0 and tokens["output"] > 0
    depth = wait_until(lambda: collector.metrics.get("llamaherd.queue.depth"), 30, what="depth")
    assert depth == [{"attributes": {"llamaherd.agent": "greeter"}, "value": 0}]


BUDGETED = """
[[turns]]
usage = { input = 1000, output = 500 }
text = "Done."
"""


def test_budget_thresholds_reach_the_collector(offline_project, collector, scheduler):
    config = offline_project.root / "config.toml"
    pricing = "\n[models.scripted.pricing]\ninput = 10.0\noutput = 10.0\n"
    config.write_text(config.read_text() + telemetry(collector) + pricing)
    offline_project.add_scripted_agent(
        "spender", "[budget]\ndaily = { usd = 0.01 }\n", script=BUDGETED
    )
    scheduler(offline_project, env=FAST_EXPORT)
    offline_project.al("run", "spender", "--no-follow", check=True)
    points = wait_until(
        lambda: collector.metrics.get("llamaherd.budget.threshold"), 30, what="budget metric"
    )
    crossed = sorted(p["attributes"]["llamaherd.budget.threshold"] for p in points)
    assert crossed == [0.8, 1.0], "one run spent $0.015 of $0.01: both thresholds at once"
    assert points[0]["attributes"]["llamaherd.budget.period"] == "daily"
    assert points[0]["attributes"]["llamaherd.agent"] == "spender"


def test_telemetry_validates_and_doctor_checks_the_collector(traced, collector):
    result = traced.al("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(traced.al("doctor", "--json").stdout)
    (found,) = [f for f in report["findings"] if f["check"] == "telemetry"]
    assert found["status"] == "ok" and "accepts traces" in found["message"]
    assert "/v1/traces" in collector.paths

    config = traced.root / "config.toml"
    config.write_text(config.read_text().replace("samplingRate", "x") + "samplingRat = 2\n")
    bad = traced.al("validate")
    assert bad.returncode == 2
    assert 'telemetry.samplingRat: unknown key (did you mean "samplingRate"?)' in bad.stdout


def test_a_collector_that_does_not_answer_is_a_doctor_error(offline_project):
    config = offline_project.root / "config.toml"
    config.write_text(
        config.read_text() + '\n[telemetry]\nenabled = true\nendpoint = "http://127.0.0.1:9"\n'
    )
    report = json.loads(offline_project.al("doctor", "--json").stdout)
    (found,) = [f for f in report["findings"] if f["check"] == "telemetry"]
    assert found["status"] == "error" and "does not answer" in found["message"]

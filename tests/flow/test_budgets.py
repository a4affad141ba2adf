"""Budgets through a real scheduler, the scripted provider reporting token counts priced by the
project's table: a run stops at the model call that reaches its budget; an agent (or the project)
past its daily budget holds its triggers until the day rolls over (fake clock)."""

from __future__ import annotations

import importlib.util
import json

from llamaherd.testing import wait_until

# $10 per million tokens either way: a call of 1,500 tokens costs $0.015.
PRICED = "\n[models.scripted.pricing]\ninput = 10.0\noutput = 10.0\n"
LOOP = """
[[turns]]
loop = true
usage = { input = 1000, output = 500 }
tool_calls = [{ name = "bash", arguments = { command = "echo turn {{ turn }}" } }]
"""
ONE_CALL = """
[[turns]]
usage = { input = 1000, output = 500 }
text = "done"
"""


def priced(project, extra: str = "") -> None:
    path = project.root / "config.toml"
    path.write_text(path.read_text() + PRICED + extra)


def test_per_run_budget_stops_the_run_at_the_model_call_that_reaches_it(project, start, runs_of):
    priced(project)
    project.add_scripted_agent("spender", "[budget]\nperRun = { usd = 0.04 }\n", script=LOOP)
    scheduler = start(project)
    assert scheduler.post("/control/run", {"agent": "spender"}).status_code == 202
    [run] = wait_until(lambda: [r for r in runs_of(project) if r.state == "error"] or None)
    assert run.reason.startswith("budget: this run spent $0.04"), run.reason
    assert run.exit_code == 3
    turns = [m for m in run.transcript if m.get("role") == "assistant"]
    assert len(turns) == 3, "0.015 x 3 reached 0.04 at the third call: no fourth"
    last = run.transcript[-1]
    assert last["role"] == "tool" and last["content"].startswith("not run: budget")
    assert run.input_tokens == 3000 and run.output_tokens == 1500
    logs = project.al("logs", run.id, "--json", check=True).stdout.splitlines()
    assert any(json.loads(line)["type"] == "budget_stop" for line in logs)


def test_per_run_token_budget(project, start, runs_of):
    project.add_scripted_agent("spender", "[budget]\nperRun = { tokens = 3000 }\n", script=LOOP)
    scheduler = start(project)
    scheduler.post("/control/run", {"agent": "spender"})
    [run] = wait_until(lambda: [r for r in runs_of(project) if r.state == "error"] or None)
    assert run.reason == "budget: this run spent 3,000 of 3,000 tokens (perRun)"
    assert run.exit_code == 3


def test_daily_budget_holds_triggers_until_the_day_rolls_over(project, start, clock, runs_of):
    priced(project)
    project.add_scripted_agent(
        "spender", "[budget]\ndaily = { usd = 0.01 }\nmonthly = { usd = 1 }\n", script=ONE_CALL
    )
    scheduler = start(project)
    for _ in range(3):
        assert scheduler.post("/control/run", {"agent": "spender"}).status_code == 202
    wait_until(lambda: [r.state for r in runs_of(project)] == ["done"])
    # $0.015 of $0.01 spent: the two other triggers wait, kept in the queue.
    stat = json.loads(project.al("stat", "spender", "--json", check=True).stdout)
    [row] = stat["agents"]
    assert row["queued"] == 2 and row["held"].startswith("over budget: agent spender spent")
    assert "waits until 2026-01-02 00:00" in row["held"]
    daily = next(b for b in row["budget"] if b["period"] == "daily")
    assert daily["spent_usd"] == 0.015 and daily["fraction"] == 1.5
    text = project.al("stat", "spender", check=True, env={"COLUMNS": "300"}).stdout
    assert "spender waits: over budget: agent spender spent $0.015 of $0.01 daily" in text
    assert "budget daily (agent): $0.015 of $0.01 (150%), resets in 1d" in text
    log = scheduler.read_log()
    assert "budget: agent spender has spent $0.015 of $0.01 of its daily budget (80%)" in log
    assert "of its daily budget (100%): it starts no more runs" in log
    assert len(runs_of(project)) == 1
    if importlib.util.find_spec("llamaherd_dashboard") is not None:
        page = scheduler.get("/agents/spender").text
        assert "Flow control and budgets" in page
        assert "Waits: over budget: agent spender spent $0.015 of $0.01 daily" in page
        assert "budget daily (agent): $0.015 of $0.01 (150%), resets in 1d" in page
    stats = project.al("stats", "spender", check=True, env={"COLUMNS": "300"}).stdout
    assert "spender: budget daily (agent): $0.015 of $0.01 (150%)" in stats
    assert "spender: budget monthly (agent): $0.015 of $1.00 (2%)" in stats

    clock.advance(86400)  # the next day: one more run, then held again
    wait_until(lambda: len(runs_of(project)) == 2 and runs_of(project)[0].state == "done")
    clock.advance(86400)
    wait_until(lambda: len(runs_of(project)) == 3 and runs_of(project)[0].state == "done")
    assert all(r.state == "done" for r in runs_of(project)), "none lost"


def test_project_budget_holds_every_agent(project, start, runs_of):
    priced(project, "\n[budget]\ndaily = { usd = 0.02 }\n")
    project.add_scripted_agent("alpha", "", script=ONE_CALL)
    project.add_scripted_agent("beta", "", script=ONE_CALL)
    scheduler = start(project)
    scheduler.post("/control/run", {"agent": "alpha"})
    wait_until(lambda: [r.state for r in runs_of(project, "alpha")] == ["done"])
    scheduler.post("/control/run", {"agent": "beta"})
    wait_until(lambda: [r.state for r in runs_of(project, "beta")] == ["done"])
    # $0.03 of the project's $0.02: neither agent starts another run.
    scheduler.post("/control/run", {"agent": "alpha"})
    scheduler.post("/control/run", {"agent": "beta"})
    stat = json.loads(project.al("stat", "--json", check=True).stdout)
    for row in stat["agents"]:
        assert row["queued"] == 1
        assert row["held"].startswith("over budget: the project spent $0.03 of $0.02 daily")
    assert len(runs_of(project)) == 2

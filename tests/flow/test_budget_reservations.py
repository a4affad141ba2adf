"""Budgets against concurrency and lies: admission reserves each run's expected spend, so eight
triggers at once never overshoot a daily budget; held triggers start at the period's roll-over
(days and months in a non-UTC zone, on a clock that moves time only: it runs on in real time
from the moment set); usage a model endpoint reports that cannot be right is refused."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

from llamaherd.budgets import Period
from llamaherd.testing import chat_reply, wait_until

ON_TIME = 0.5
THREE_THOUSAND = """
[[turns]]
usage = { input = 2000, output = 1000 }
text = "done"
"""


def moment(zone: str, *when: int) -> float:
    return datetime(*when, tzinfo=ZoneInfo(zone)).timestamp()


def spent_tokens(project, agent: str, when: float, zone: str, scope: str = "agent_day") -> int:
    store = project.store()
    try:
        return store.spend_totals(agent, Period.at(when, ZoneInfo(zone)))[scope]["tokens"]
    finally:
        store.close()


def held(project, agent: str) -> str:
    row = json.loads(project.al("stat", agent, "--json", check=True).stdout)["agents"][0]
    return row.get("held") or ""


def test_eight_triggers_at_once_stay_within_a_daily_budget_and_resume_at_midnight(
    tmp_path, credentials, kit, clock, start, runs_of
):
    zone = "Asia/Kolkata"  # UTC+5:30: its midnight is no UTC hour
    project = kit.flow_project(tmp_path / "project", clock, credentials, f'timezone = "{zone}"\n')
    project.add_scripted_agent(
        "spender", "scale = 8\n[budget]\ndaily = { tokens = 10000 }\n", script=THREE_THOUSAND
    )
    clock.run_from(moment(zone, 2026, 3, 10, 10, 0))
    scheduler = start(project)
    assert scheduler.post("/control/run", {"agent": "spender", "count": 8}).status_code == 202

    def day_done(runs: int) -> bool:
        finished = [r for r in runs_of(project) if r.state == "done"]
        return len(finished) == runs and "waits until" in held(project, "spender")

    wait_until(lambda: day_done(3), timeout=60, what="three runs, the rest held till midnight")
    assert spent_tokens(project, "spender", clock.now, zone) == 9000, "no run beyond 10,000"
    assert held(project, "spender").endswith("waits until 2026-03-11 00:00 (IST)")
    assert len(runs_of(project)) == 3, "the first ran alone (no history), then two at once"

    for day in (11, 12):
        midnight = moment(zone, 2026, 3, day, 0, 0)
        clock.run_from(midnight - 1)  # a second before midnight, running on
        count = 6 if day == 11 else 8
        runs = wait_until(
            lambda n=count: len(runs_of(project)) == n and runs_of(project),
            timeout=60,
            what=f"{count} runs",
        )
        first_today = min(r.created_at for r in runs if r.created_at >= midnight - 1)
        assert midnight <= first_today <= midnight + ON_TIME, first_today - midnight
        wait_until(lambda n=count: all(r.state == "done" for r in runs_of(project)), 60)
        assert spent_tokens(project, "spender", midnight + 1, zone) <= 10000
    assert spent_tokens(project, "spender", moment(zone, 2026, 3, 11, 12, 0), zone) == 9000
    assert spent_tokens(project, "spender", moment(zone, 2026, 3, 12, 12, 0), zone) == 6000


def test_a_monthly_budget_releases_its_held_trigger_when_the_month_rolls_over(
    tmp_path, credentials, kit, clock, start, runs_of
):
    zone = "America/New_York"
    project = kit.flow_project(tmp_path / "project", clock, credentials, f'timezone = "{zone}"\n')
    project.add_scripted_agent(
        "spender", "[budget]\nmonthly = { tokens = 4000 }\n", script=THREE_THOUSAND
    )
    clock.run_from(moment(zone, 2026, 3, 31, 18, 0))
    scheduler = start(project)
    for _ in range(2):
        assert scheduler.post("/control/run", {"agent": "spender"}).status_code == 202
    wait_until(
        lambda: (
            [r.state for r in runs_of(project)] == ["done"]
            and "waits until 2026-04-01 00:00 (EDT)" in held(project, "spender")
        ),
        timeout=30,
        what="one run, the next held till April",
    )
    month = moment(zone, 2026, 4, 1, 0, 0)
    clock.run_from(month - 1)
    [second, _] = wait_until(lambda: len(runs_of(project)) == 2 and runs_of(project), 30)
    assert month <= second.created_at <= month + ON_TIME, second.created_at - month


def test_usage_that_cannot_be_right_is_refused_and_the_budget_still_stops_the_run(
    offline_project, scheduler, model_server
):
    """An OpenAI-compatible endpoint reporting -955,000 prompt tokens on every call: each call
    counts as its size instead, so the ledger grows and the daily budget stops the run."""
    project = offline_project
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.liar]\nprovider = "openai"\nmodel = "m"\n'
            f'base_url = "{model_server.url}/v1"\n'
        )
    project.add_scripted_agent(
        "spender", 'models = ["liar"]\n[budget]\ndaily = { tokens = 20000 }\n'
    )
    lie = chat_reply("working", [("bash", {"command": "true"})])
    lie["usage"] = {"prompt_tokens": -955000, "completion_tokens": 5}
    model_server.repeat_last = True
    model_server.reply(200, lie)
    sched = scheduler(project)
    assert sched.post("/control/run", {"agent": "spender"}).status_code == 202
    run = project.wait_run(lambda runs: next((r for r in runs if r.state == "error"), None), 90)
    assert run.exit_code == 3 and run.reason.startswith("budget: over budget"), run.reason
    today = spent_tokens(project, "spender", run.created_at, "UTC")
    assert 20000 <= today < 40000, today
    logs = [
        json.loads(line)
        for line in project.al("logs", run.id, "--json", check=True).stdout.splitlines()
    ]
    refused = [e for e in logs if e["type"] == "usage_refused"]
    assert refused and "input_tokens=-955000" in refused[0]["data"]["message"]
    assert "usage that cannot be right" in sched.read_log()

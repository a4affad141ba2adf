"""Test runs are fenced from production: flow control and budgets do not apply to them, they
never appear in the project's runs, stats, spend or queues, no lifecycle plugin hears of them,
and what they stage is the case's test credentials, never the real ones."""

from __future__ import annotations

import json
import time

from llamaherd.budgets import Period, zone

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo spending" } }]
[[turns]]
text = "done"
"""
# A lifecycle plugin of the kind that exports or notifies: it notes every run it hears of.
WATCHER = """
import json, os
from llamaherd import hookimpl

def _note(kind, run):
    with open(os.environ["WATCHER_LOG"], "a") as fh:
        fh.write(json.dumps([kind, run.run_id]) + "\\n")

@hookimpl
def run_started(run):
    _note("started", run)

@hookimpl
def run_event(run, type, data, at):
    _note("event", run)

@hookimpl
def run_finished(run, result):
    _note("finished", run)
"""


def test_budgets_and_flow_control_do_not_apply_and_nothing_shows_in_production(project, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "watcher_plugin.py").write_text(WATCHER)
    watched = tmp_path / "watcher.log"
    env = {
        "PYTHONPATH": str(site),
        "AL_PLUGINS": ",".join(filter(None, [project.env.get("AL_PLUGINS"), "watcher_plugin"])),
        "WATCHER_LOG": str(watched),
    }
    # A run may spend 50 tokens (a scripted turn is estimated at hundreds); the project's day
    # is spent as soon as anything was; and triggers are debounced for an hour.
    with (project.root / "config.toml").open("a") as fh:
        fh.write("\n[budget]\ndaily = { tokens = 1 }\n")
    project.add_scripted_agent(
        "spender",
        "[budget]\nperRun = { tokens = 50 }\n",
        SCRIPT,
    )
    production = project.al("run", "spender", env=env)
    assert production.returncode == 3, production.stdout + production.stderr  # the budget
    (project.root / "agents" / "spender" / "config.toml").open("a").write(
        '\n[flow]\ndebounce = { period = "1h" }\n'
    )
    project.write(
        "agents/spender/tests/spends.toml",
        """
        [trigger]
        kind = "manual"
        [model]
        live = true
        [expect]
        state = "done"
        max_turns = 2
        """,
    )
    store = project.store()
    try:
        before_runs = [r.id for r in store.runs(limit=100)]
        period = Period.at(time.time(), zone(project.load()))
        before_spend = store.spend_totals("spender", period)
    finally:
        store.close()
    watched.write_text("")

    tested = project.al("test", "--json", env=env)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    [case] = json.loads(tested.stdout)["cases"]
    run = case["run"]
    assert run["state"] == "done" and run["turns"] == 2
    assert run["input_tokens"] + run["output_tokens"] > 50, "past the perRun budget, not stopped"

    store = project.store()
    try:
        assert [r.id for r in store.runs(limit=100)] == before_runs
        assert store.get_run(run["id"]) is None
        assert store.spend_totals("spender", period) == before_spend
        assert store.queue_depth().get("spender", 0) == 0
    finally:
        store.close()
    listed = project.al("runs", "--json")
    assert run["id"] not in listed.stdout
    stats = json.loads(project.al("stats", "--json").stdout)
    assert run["id"] not in json.dumps(stats)
    assert watched.read_text() == "", "no lifecycle plugin heard of the test run"
    assert not list((project.root / ".al" / "tests").iterdir())


def test_the_case_credentials_are_staged_never_the_real_ones(project, tmp_path):
    from llamaherd.api import CredentialStore

    CredentialStore(project.creds).write("github_token", "default", {"token": "REAL-SECRET"})
    project.add_scripted_agent(
        "staged",
        'credentials = ["github_token"]\n',
        """
        [[turns]]
        tool_calls = [{ name = "bash", arguments = { command = "cat $AL_CREDENTIALS_PATH/github_token/default/token > seen.txt; echo $GITHUB_TOKEN >> seen.txt" } }]
        [[turns]]
        text = "done"
        """,
    )
    project.write(
        "agents/staged/tests/staged.toml",
        """
        [trigger]
        kind = "manual"
        [model]
        live = true
        [[expect.files]]
        path = "seen.txt"
        equals = "ghp_test\\nghp_test\\n"
        [credentials]
        github_token = { token = "ghp_test" }
        """,
    )
    tested = project.al("test")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "REAL-SECRET" not in tested.stdout + tested.stderr


def test_a_recorded_case_holds_no_secret(project):
    from llamaherd.api import CredentialStore

    CredentialStore(project.creds).write("github_token", "default", {"token": "ghp_REALSECRET42"})
    project.add_scripted_agent(
        "leaky",
        'credentials = ["github_token"]\n',
        """
        [[turns]]
        tool_calls = [{ name = "bash", arguments = { command = "echo token=$GITHUB_TOKEN && setenv SESSION s3ss10n-v4lue" } }]
        [[turns]]
        tool_calls = [{ name = "return_value", arguments = { value = "{{ last_result }}" } }]
        [[turns]]
        text = "done"
        """,
    )
    ran = project.al("run", "leaky")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    store = project.store()
    try:
        [run] = store.runs(agent="leaky", limit=5)
    finally:
        store.close()
    recorded = project.al("record", run.id, "--name", "leak")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    written = sorted((project.root / "agents" / "leaky" / "tests").iterdir())
    assert [p.name for p in written] == ["leak.cassette.json", "leak.toml"]
    text = "".join(p.read_text() for p in written)
    assert "ghp_REALSECRET42" not in text and "s3ss10n-v4lue" not in text
    assert "token=***" in text
    # The case replays with its own test token, masked the same way.
    tested = project.al("test", "leaky")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_area_of_an_al_test_that_died_is_removed_by_the_next(project):
    project.add_scripted_agent("idle", "", '[[turns]]\ntext = "nothing to do"\n')
    project.write(
        "agents/idle/tests/idle.toml", '[trigger]\nkind = "manual"\n[model]\nlive = true\n'
    )
    left = project.root / ".al" / "tests" / "999999999-deadbeef"
    left.mkdir(parents=True)
    (left / "idle-idle.db").write_text("a store of a killed al test")
    tested = project.al("test")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert not left.exists() and not list(left.parent.iterdir())

"""Agent lifecycle states through real processes: `al start`, `al state`, `al approve`/`deny`,
webhooks over HTTP, a fake clock for cron, a fake model server for provider errors, and a
scheduler killed with SIGKILL."""

from __future__ import annotations

import getpass
import json
import re
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from llamaherd.testing import OfflineProject, chat_reply, wait_until

from .conftest import events_of
from .helpers import dashboard_browser

MINUTE = 31_666_667 * 60  # a fake-clock minute boundary (cron ticks are at :00)
HOOKS = '\n[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n'


def add_agent(
    project: OfflineProject,
    name: str,
    config: str = "",
    tables: str = "",
    script: str | None = None,
    run_as: str | None = None,
) -> Path:
    """An agent on the host-user runtime: top-level ``config`` keys, then ``tables``."""
    if "models" not in config:
        config = 'models = ["scripted"]\n' + textwrap.dedent(config)
    runtime = f'[runtime]\ntype = "host-user"\nrun_as = "{run_as or getpass.getuser()}"\n'
    path = project.add_agent(
        name, textwrap.dedent(config) + "\n" + runtime + textwrap.dedent(tables)
    )
    if script is not None:
        project.write(f"agents/{name}/script.toml", script)
    return path


def post_webhook(url: str, body: dict) -> requests.Response:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-Delivery-Id": uuid.uuid4().hex}
    return requests.post(f"{url}/webhooks/hooks", data=data, headers=headers, timeout=10)


def runs_of(store, agent: str) -> list:
    return store.runs(agent=agent, limit=1000)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped is dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_hibernate_refuses_webhooks_and_calls_while_cron_runs(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    add_agent(
        project,
        "sleeper",
        'schedule = "* * * * *"\n',
        '[[webhooks]]\nsource = "hooks"\n',
        '[[turns]]\ntext = "checked"\n',
    )
    add_agent(
        project,
        "caller",
        "",
        "",
        """
        [[turns]]
        tool_calls = [{name = "call_agent", arguments = {agent = "sleeper", context = "wake up"}}]
        [[turns]]
        text = "called"
        """,
    )
    clock = tmp_path / "clock"
    clock.write_text(str(MINUTE + 20.0))
    sched = scheduler(project, env={"AL_FAKE_CLOCK_FILE": str(clock)})
    store = project.store()

    result = project.al("state", "sleeper", "hibernate", check=True)
    assert "idle -> hibernate" in result.stdout
    assert project.al("state", "sleeper", check=True).stdout.startswith("sleeper: hibernate")

    answer = post_webhook(sched.url, {"event": "push"})
    assert answer.status_code == 202, answer.text
    assert "hibernating" in answer.json()["refused"]["sleeper"]

    assert sched.post("/control/run", {"agent": "caller"}).status_code == 202
    caller = wait_until(lambda: [r for r in runs_of(store, "caller") if r.state == "done"])[0]
    calls = [e["data"] for e in store.events(caller.id) if e["type"] == "tool_call"]
    assert calls[0]["tool"] == "call_agent" and calls[0]["is_error"] is True
    assert "refused" in calls[0]["output"] and "hibernating" in calls[0]["output"]

    refused = events_of(store, "sleeper", "trigger.refused")
    assert sorted(e["data"]["kind"] for e in refused) == ["agent", "webhook"]
    assert (
        next(e["data"] for e in refused if e["data"]["kind"] == "agent")["caller_run"] == caller.id
    )
    assert store.queue_depth("sleeper")["sleeper"] == 0 and not runs_of(store, "sleeper")

    clock.write_text(str(MINUTE + 61.0))  # the next minute: the schedule still fires
    fired = wait_until(lambda: [r for r in runs_of(store, "sleeper") if r.state == "done"])
    assert [r.trigger_kind for r in fired] == ["scheduled"]
    assert store.agent_state("sleeper") == "hibernate"


def test_off_kills_the_active_run_at_once_and_clears_the_queue(tmp_path, scheduler):
    pidfile = tmp_path / "pid"
    project = OfflineProject(tmp_path / "proj")
    add_agent(
        project,
        "busy",
        script=f"""
        [[turns]]
        tool_calls = [{{name = "bash", arguments = {{command = "sleep 60 & echo $! > {pidfile}; wait"}}}}]
        [[turns]]
        text = "never"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    for n in range(4):
        assert sched.post("/control/run", {"agent": "busy", "payload": {"n": n}}).status_code == 202
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip()))
    active = [r for r in runs_of(store, "busy") if r.state == "running"]
    assert len(active) == 1 and store.queue_depth("busy")["busy"] == 3

    started = time.monotonic()
    answer = sched.post("/agents/busy/state", {"state": "off"})
    assert answer.status_code == 200, answer.text
    assert store.get_run(active[0].id).state == "killed"
    wait_until(lambda: not alive(pid), timeout=1, interval=0.01)
    assert time.monotonic() - started < 1.0
    assert answer.json()["killed"] == [active[0].id] and answer.json()["dropped"] == 3

    assert store.queue_depth("busy")["busy"] == 0
    dropped = events_of(store, "busy", "trigger.dropped")
    assert len(dropped) == 1 and dropped[0]["data"]["count"] == 3
    assert "agent switched off" in store.get_run(active[0].id).reason

    refused = project.al("run", "busy")
    assert refused.returncode == 1 and "is off" in refused.stderr
    stat = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert (stat["state"], stat["queued"], stat["active"]) == ("off", 0, 0)
    assert (
        requests.post(
            sched.url + "/agents/busy/state", json={"state": "idle"}, timeout=10
        ).status_code
        == 401
    )
    assert "off -> idle" in project.al("state", "busy", "idle", check=True).stdout
    assert store.agent_state("busy") == "idle"


LOOP = """
[[turns]]
loop = true
tool_calls = [{name = "bash", arguments = {command = "echo turn {{ turn }}"}}]
"""


def _suspended(store, agent: str, turns: int):
    """The agent's run once it is suspended after ``turns`` model turns."""

    def check():
        runs = [r for r in runs_of(store, agent) if r.state == "waiting"]
        if not runs or store.agent_state(agent) != "suspended":
            return None
        calls = [e for e in store.events(runs[0].id) if e["type"] == "tool_call"]
        return runs[0] if len(calls) == turns else None

    return wait_until(check)


def test_max_turns_suspends_approve_resumes_silence_turns_it_off(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "looper", "maxTurns = 2\nsuspendTimeout = 2\n", script=LOOP)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "looper"}).status_code == 202
    run = _suspended(store, "looper", 2)
    assert run.wait_filter["type"] == "suspension"

    answer = sched.post(f"/control/runs/{run.id}/approve", {})  # `al approve`: see below
    assert answer.json() == {"run": run.id, "approved": True}
    run = _suspended(store, "looper", 4)  # the same run: two more turns, then suspended again
    outputs = [e["data"]["output"] for e in store.events(run.id) if e["type"] == "tool_call"]
    assert outputs == ["turn 1", "turn 2", "turn 3", "turn 4"]
    suspended_at = [
        e for e in events_of(store, "looper", "state") if e["data"]["state"] == "suspended"
    ][-1]["at"]

    wait_until(lambda: store.get_run(run.id).state == "killed", timeout=15)
    final = store.get_run(run.id)
    assert "suspendTimeout (2 s)" in final.reason
    assert final.finished_at - suspended_at >= 1.9
    assert store.agent_state("looper") == "off"
    last = events_of(store, "looper", "state")[-1]["data"]
    assert last["state"] == "off" and "not answered" in last["cause"]


def test_dashboard_approves_a_suspended_run(tmp_path, scheduler):
    pytest.importorskip("llamaherd_dashboard")
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "looper", "maxTurns = 1\n", script=LOOP)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "looper"}).status_code == 202
    run = _suspended(store, "looper", 1)
    browser = dashboard_browser(sched.url, sched.token)  # session cookies and CSRF token
    page = browser.get(f"{sched.url}/runs/{run.id}", timeout=10).text
    assert f"/api/runs/{run.id}/approve" in page and "Deny" in page
    csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page).group(1)
    url = f"{sched.url}/api/runs/{run.id}/approve"
    assert browser.post(url, data={"csrf": "wrong"}, timeout=10).status_code == 403
    answer = browser.post(url, data={"csrf": csrf}, allow_redirects=False, timeout=10)
    assert answer.status_code == 303 and answer.headers["location"] == f"/runs/{run.id}"
    _suspended(store, "looper", 2)
    cause = [e for e in events_of(store, "looper", "state") if e["data"]["state"] == "idle"][-1]
    assert "approve from the dashboard" in cause["data"]["cause"]


def test_al_approve_then_al_deny_turns_the_agent_off(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "looper", "maxTurns = 1\n", script=LOOP)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "looper"}).status_code == 202
    run = _suspended(store, "looper", 1)
    stat = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert stat["state"] == "suspended" and stat["waiting"] == 1
    assert (
        "al approve"
        in [e for e in store.events(run.id) if e["type"] == "suspended"][0]["data"]["reason"]
    )

    result = project.al("approve", run.id, check=True)
    assert f"run {run.id} approved" in result.stdout
    _suspended(store, "looper", 2)
    assert requests.post(f"{sched.url}/control/runs/{run.id}/deny", timeout=10).status_code == 401
    result = project.al("deny", run.id[:-2], check=True)  # a unique prefix names the run too
    assert f"run {run.id} denied" in result.stdout
    assert store.get_run(run.id).state == "killed"
    assert store.agent_state("looper") == "off"
    again = project.al("approve", run.id)
    assert again.returncode == 1 and "not suspended" in again.stderr


def test_rate_limits_and_server_errors_leave_the_agent_idle(tmp_path, scheduler, model_server):
    model_server.reply(
        429, {"error": {"type": "rate_limit", "message": "slow"}}, {"retry-after": "0"}
    )
    model_server.reply(500, {"error": {"type": "server_error", "message": "upstream hiccup"}})
    model_server.reply(200, chat_reply(tool_calls=[("return_value", {"value": "made it"})]))
    model_server.reply(200, chat_reply("done"))  # then, with nothing queued: 500 after 500
    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.fake]\nprovider = "openai"\nmodel = "m"\nbase_url = "{model_server.url}/v1"\n'
        )
    add_agent(project, "patient", 'models = ["fake"]\n')
    add_agent(project, "stranded", 'models = ["fake"]\n')
    sched = scheduler(project, env={"AL_RETRY_BASE_DELAY": "0.01"})
    store = project.store()
    assert sched.post("/control/run", {"agent": "patient"}).status_code == 202

    done = wait_until(lambda: [r for r in runs_of(store, "patient") if r.state == "done"])[0]
    assert done.return_value == "made it"
    problems = [e["data"] for e in store.events(done.id) if e["type"] == "provider_error"]
    assert [p["error_class"] for p in problems] == ["RateLimited", "Transient"]

    assert sched.post("/control/run", {"agent": "stranded"}).status_code == 202
    failed = wait_until(lambda: [r for r in runs_of(store, "stranded") if r.state == "error"])[0]
    assert len([e for e in store.events(failed.id) if e["type"] == "provider_error"]) >= 5
    assert not [e for e in store.events(failed.id) if e["type"] == "run_error"]
    for agent in ("patient", "stranded"):
        assert store.agent_state(agent) == "idle"
        assert not events_of(store, agent, "state")
    assert "provider error (retry)" in sched.read_log()


def test_an_agent_hibernates_or_switches_itself_off(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    add_agent(
        project,
        "napper",
        tables='[[webhooks]]\nsource = "hooks"\n',
        script="""
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "al-state hibernate nothing left today"}}]
        [[turns]]
        text = "resting"
        """,
    )
    add_agent(
        project,
        "quitter",
        script="""
        [[turns]]
        tool_calls = [{name = "set_state", arguments = {state = "off", reason = "project finished"}}]
        [[turns]]
        tool_calls = [{name = "bash", arguments = {command = "echo still here"}}]
        [[turns]]
        text = "bye"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    project.al("pause", "napper", check=True)
    post_webhook(sched.url, {"event": "one"})
    assert sched.post("/control/run", {"agent": "napper"}).status_code == 202
    project.al("resume", "napper", check=True)
    first = wait_until(lambda: [r for r in runs_of(store, "napper") if r.state == "done"])[0]
    # The run ends with the turn that hibernated its agent: al-state's answer is its last word.
    assert json.loads(first.transcript[-1]["content"])["ok"] is True
    assert first.trigger_kind == "webhook"
    assert store.agent_state("napper") == "hibernate"
    assert "nothing left today" in events_of(store, "napper", "state")[-1]["data"]["cause"]
    # Hibernate means timers only: the queued manual run was dropped with it.
    assert [e["data"]["count"] for e in events_of(store, "napper", "trigger.dropped")] == [1]
    assert [r.trigger_kind for r in runs_of(store, "napper")] == ["webhook"]

    project.al("pause", "quitter", check=True)
    for _ in range(3):
        assert sched.post("/control/run", {"agent": "quitter"}).status_code == 202
    project.al("resume", "quitter", check=True)
    own = wait_until(
        lambda: [r for r in runs_of(store, "quitter") if r.state in ("done", "killed")]
    )[0]
    assert own.state == "done", "the run that switched its agent off finishes"
    assert store.agent_state("quitter") == "off" and len(runs_of(store, "quitter")) == 1
    dropped = events_of(store, "quitter", "trigger.dropped")
    assert [e["data"]["count"] for e in dropped] == [2]


def test_hibernating_drops_queued_webhooks_and_manual_runs(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    add_agent(project, "idler", "", '[[webhooks]]\nsource = "hooks"\n', '[[turns]]\ntext = "ok"\n')
    sched = scheduler(project)
    store = project.store()
    project.al("pause", "idler", check=True)
    for n in range(3):
        assert post_webhook(sched.url, {"event": "e", "n": n}).json()["queued"] == ["idler"]
    assert sched.post("/control/run", {"agent": "idler"}).status_code == 202
    result = project.al("state", "idler", "hibernate", "--reason", "quiet week", check=True)
    assert "dropped 4 queued trigger(s)" in result.stdout  # hibernate means timers only
    assert [e["data"]["count"] for e in events_of(store, "idler", "trigger.dropped")] == [4]
    assert "quiet week" in events_of(store, "idler", "state")[-1]["data"]["cause"]
    project.al("resume", "idler", check=True)
    assert store.queue_depth("idler")["idler"] == 0 and not runs_of(store, "idler")


def test_a_call_dropped_by_hibernation_is_settled_for_its_caller(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "target", script='[[turns]]\ntext = "served"\n')
    waiter = tmp_path / "call-and-wait.sh"
    waiter.write_text(
        "id=$(al-subagent target please | python3 -c "
        "'import json, sys; print(json.load(sys.stdin)[\"call_id\"])')\n"
        "al-subagent-wait $id 30\n"
    )
    add_agent(
        project,
        "caller",
        script=f"""
        [[turns]]
        tool_calls = [{{name = "bash", arguments = {{command = "sh {waiter}"}}}}]
        [[turns]]
        text = "finished"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    project.al("pause", "target", check=True)
    assert sched.post("/control/run", {"agent": "caller"}).status_code == 202
    wait_until(lambda: store.queue_depth("target")["target"] == 1)
    started = time.monotonic()
    assert "dropped 1" in project.al("state", "target", "hibernate", check=True).stdout
    caller = wait_until(lambda: [r for r in runs_of(store, "caller") if r.state == "done"])[0]
    assert time.monotonic() - started < 15, "the caller's wait ended when the call was dropped"
    output = [e["data"] for e in store.events(caller.id) if e["type"] == "tool_call"][0]["output"]
    answer = json.loads(output.splitlines()[0])
    assert answer["state"] == "error" and "hibernate" in answer["error"]


@pytest.mark.root
def test_sandbox_failure_holds_the_agent_in_error_until_al_run(tmp_path, scheduler):
    user = f"alst{uuid.uuid4().hex[:8]}"
    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    add_agent(
        project,
        "builder",
        "",
        '[[webhooks]]\nsource = "hooks"\n',
        '[[turns]]\ntext = "built"\n',
        run_as=user,
    )
    add_agent(project, "bystander", script='[[turns]]\ntext = "ok"\n')
    sched = scheduler(project)
    store = project.store()
    try:
        assert sched.post("/control/run", {"agent": "builder"}).status_code == 202

        def held_in_error():  # the run ends first, then its failure sets the agent's state
            runs = [r for r in runs_of(store, "builder") if r.state == "error"]
            return runs if runs and store.agent_state("builder") == "error" else None

        failed = wait_until(held_in_error)[0]
        assert "does not exist" in failed.reason
        assert [e["type"] for e in store.events(failed.id)].count("run_error") == 1
        assert f"run {failed.id}" in events_of(store, "builder", "state")[-1]["data"]["cause"]

        assert post_webhook(sched.url, {"event": "build"}).json()["queued"] == ["builder"]
        # A run queued after it goes through the dispatcher first: held, not run.
        assert sched.post("/control/run", {"agent": "bystander"}).status_code == 202
        wait_until(lambda: [r for r in runs_of(store, "bystander") if r.state == "done"])
        assert store.queue_depth("builder")["builder"] == 1 and len(runs_of(store, "builder")) == 1
        assert (
            json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]["state"]
            == "error"
        )

        subprocess.run(["useradd", "--create-home", user], check=True)
        result = project.al("run", "builder", timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        wait_until(lambda: len([r for r in runs_of(store, "builder") if r.state == "done"]) == 2)
        assert store.agent_state("builder") == "idle"
        assert events_of(store, "builder", "state")[-1]["data"]["cause"] == "manual run"
    finally:
        subprocess.run(["userdel", "--remove", user], capture_output=True)


def _remove_sandbox(run) -> None:
    """What a host restart does to a run's sandbox: its processes and files are gone."""
    from llamaherd.plugins import registry

    sandbox = registry().runtimes["host-user"].attach(run.sandbox, None)
    sandbox.kill()
    sandbox.cleanup()


def _notice_line(notice: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)}: (.+)$", notice, re.MULTILINE)
    assert match, f"{label!r} missing from:\n{notice}"
    return match.group(1)


def test_kill9_requeues_with_a_recovery_notice_and_honours_on_interrupted(tmp_path, scheduler):
    # The first run of each agent sleeps until it is interrupted; a recovered one goes on.
    script = f"""
    [[turns]]
    tool_calls = [{{name = "bash", arguments = {{command = "mkdir {tmp_path}/$AL_AGENT && sleep 60"}}}}]
    [[turns]]
    text = "done"
    """
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "worker", script=script)
    add_agent(project, "strict", 'onInterrupted = "fail"\n', script=script)
    sched = scheduler(project)
    store = project.store()
    for agent in ("worker", "strict"):
        assert sched.post("/control/run", {"agent": agent}).status_code == 202

    def sleeping(agent):
        runs = [r for r in runs_of(store, agent) if r.state == "running" and r.sandbox]
        return runs and any(e["type"] == "model_call" for e in store.events(runs[0].id)) and runs[0]

    first, strict = wait_until(lambda: sleeping("worker")), wait_until(lambda: sleeping("strict"))
    wait_until(lambda: (tmp_path / "worker").is_dir() and (tmp_path / "strict").is_dir())
    sched.kill9()
    killed_at = time.time()
    last_progress = store.events(first.id)[-1]["at"]
    for run in (first, strict):
        _remove_sandbox(store.get_run(run.id))
    time.sleep(2.0)  # the scenario: the system stays down a while (not a wait for anything)

    restarted = time.time()
    scheduler(project)
    again = wait_until(lambda: [r for r in runs_of(store, "worker") if r.trigger.get("recovery")])[
        0
    ]
    wait_until(lambda: store.get_run(again.id).state == "done", timeout=30)
    assert (store.get_run(first.id).state, store.get_run(first.id).reason) == (
        "error",
        "interrupted",
    )
    assert store.get_run(strict.id).reason == "interrupted"
    assert len(runs_of(store, "strict")) == 1, "onInterrupted = fail: not requeued"

    user = next(m for m in store.get_run(again.id).transcript if m.get("role") == "user")["content"]
    notice = user.split("<recovery-notice>")[1].split("</recovery-notice>")[0]
    assert _notice_line(notice, "Interrupted run") == first.id
    _check_outage_times(notice, first, last_progress, killed_at, restarted)
    assert user.index("<recovery-notice>") < user.index("triggered manually")


def _check_outage_times(
    text: str, run, last_progress: float, killed_at: float, restarted: float
) -> None:
    """The times of an outage as a recovery notice says them, checked against what happened:
    ``run`` started, made its last progress, its scheduler was killed, another started."""
    assert _notice_line(text, "Interrupted run started") == iso(run.started_at)
    assert _notice_line(text, "Its last recorded progress") == iso(last_progress)

    def stamp(label: str) -> float:
        found = _notice_line(text, label)
        return datetime.strptime(found, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()

    now, since = stamp("Now"), stamp("System down since")
    assert restarted - 1 <= now <= time.time()
    assert last_progress - 1 <= since <= killed_at  # its scheduler's last heartbeat
    down = float(_notice_line(text, "System down for").removeprefix("about ").removesuffix(" s"))
    # From its last heartbeat to the recovery (a loaded machine may take seconds to restart).
    assert restarted - killed_at - 1 <= down <= now - last_progress + 2


def test_an_adopted_runs_cut_off_call_says_the_outage_as_a_recovery_notice_would(
    tmp_path, scheduler
):
    """Issue 42 item 4: after ``kill -9`` of its scheduler, a run whose sandbox lives is
    adopted by the next one; the tool call the crash cut off is answered with the times a
    ``<recovery-notice>`` gives (when the run started, its last progress, since when the system
    was down, now, the downtime), recorded at the adoption as the run's ``adopted`` event."""
    script = f"""
    [[turns]]
    tool_calls = [{{name = "bash", arguments = {{command = "touch {tmp_path}/begun && sleep 60"}}}}]
    [[turns]]
    text = "done"
    """
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "worker", script=script)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "worker"}).status_code == 202
    first = wait_until(lambda: [r for r in runs_of(store, "worker") if r.sandbox])[0]
    wait_until(lambda: (tmp_path / "begun").exists())
    sched.kill9()
    killed_at = time.time()
    last_progress = store.events(first.id)[-1]["at"]
    time.sleep(2.0)  # the scenario: the system stays down a while (not a wait for anything)

    restarted = time.time()
    scheduler(project)
    wait_until(lambda: store.get_run(first.id).state == "done", timeout=30)
    assert len(runs_of(store, "worker")) == 1, "adopted, not requeued"
    (adopted,) = [e["data"] for e in store.events(first.id) if e["type"] == "adopted"]
    assert adopted["interrupted_run"] == first.id and adopted["down_seconds"] >= 2
    result = next(m for m in store.get_run(first.id).transcript if m.get("role") == "tool")
    assert result["is_error"] and result["content"].startswith(
        "interrupted before a result was recorded: the scheduler running this run stopped"
    )
    _check_outage_times(result["content"], first, last_progress, killed_at, restarted)


def test_foreground_run_is_answered_without_a_scheduler(tmp_path):
    project = OfflineProject(tmp_path / "proj")
    add_agent(project, "looper", "maxTurns = 1\n", script=LOOP)
    command = [sys.executable, "-m", "llamaherd", "--project", str(project.root), "run", "looper"]
    foreground = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        store = project.store()
        run = _suspended(store, "looper", 1)
        assert "approved" in project.al("approve", run.id, check=True).stdout
        _suspended(store, "looper", 2)
        assert "denied" in project.al("deny", run.id, check=True).stdout
        output, _ = foreground.communicate(timeout=30)
    finally:
        if foreground.poll() is None:
            foreground.kill()
    assert foreground.returncode == 137, output
    assert store.get_run(run.id).state == "killed" and store.agent_state("looper") == "off"


WAIT_FOR_DEPLOY = """
[[turns]]
tool_calls = [{name = "wait_for_trigger", arguments = {filter = {type = "webhooks", event = "deploy"}, timeout = "60s"}}]
[[turns]]
text = "deployed"
"""


def test_an_agent_whose_only_run_waits_is_shown_waiting(tmp_path, scheduler):
    """Issue 42 item 5: ``al stat`` (JSON and table; the terminal view draws the same table, in
    cyan) says ``waiting``, not ``idle`` with a waiting run beside it; once the run resumes
    and ends, ``idle`` again."""
    from llamaherd.termview import STATE_STYLES

    project = OfflineProject(tmp_path / "proj")
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    add_agent(project, "deployer", script=WAIT_FOR_DEPLOY)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "deployer"}).status_code == 202
    (run,) = wait_until(lambda: [r for r in runs_of(store, "deployer") if r.state == "waiting"])
    row = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert (row["state"], row["active"], row["waiting"]) == ("waiting", 0, 1)
    table = project.al("stat", check=True).stdout
    assert [line.split()[:2] for line in table.splitlines() if line.startswith("deployer")] == [
        ["deployer", "waiting"]
    ]
    assert STATE_STYLES["waiting"] == "cyan"
    assert post_webhook(sched.url, {"event": "deploy"}).json()["resumed"] == [run.id]
    wait_until(lambda: [r for r in runs_of(store, "deployer") if r.state == "done"])
    row = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert row["state"] == "idle"

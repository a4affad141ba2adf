"""Agents talk and are talked to (issue 23, items 8 and 9): loop modes and the turn tools,
`al reply`, `al say`, the dashboard's Reply and Say, and `al chat`, through real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from llamaherd.prompts import MODE_NOTES
from llamaherd.testing import OfflineProject, wait_until

from .helpers import dashboard_browser, events, one_run, runs_of, tool_results

AUTONOMOUS = (
    "You are in autonomous mode. You will not receive human input during this session. Use "
    "the say tool to report progress. Use respond to communicate results. Call set_state when "
    "your work is complete."
)
HELPER = """
[[turns]]
tool_calls = [{name = "ask", arguments = {question = "Which colour?"}}]
[[turns]]
tool_calls = [{name = "respond", arguments = {message = "You chose {{ last_result }}"}}]
[[turns]]
text = "Anything else? You said: {{ last_user }}"
[[turns]]
tool_calls = [{name = "set_state", arguments = {state = "idle", reason = "talk over"}}]
"""


def system_of(run) -> str:
    return next(m for m in run.transcript if m.get("role") == "system")["content"]


def waiting_for(store, run_id: str, kind: str, count: int = 1):
    """The run once it waits for a human after its ``count``-th ``kind`` (ask or respond)."""

    def check():
        run = store.get_run(run_id)
        wait = run.wait_filter or {}
        said = events(store, run_id, kind)
        return run.state == "waiting" and wait.get("kind") == kind and len(said) == count and run

    return wait_until(check, what=f"{run_id} waiting after {kind} #{count}")


# ------------------------------------------------------------------ 8. loop modes, turn tools


def test_autonomous_mode_says_and_responds_and_nobody_answers(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent(
        "auto",
        script="""
        [[turns]]
        tool_calls = [
          {name = "say", arguments = {message = "halfway there"}},
          {name = "ask", arguments = {question = "which branch?"}},
          {name = "respond", arguments = {message = "the answer is 42"}},
        ]
        [[turns]]
        text = "finished"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "auto"}).status_code == 202
    run = one_run(store, "auto", "done")
    assert AUTONOMOUS in system_of(run) and MODE_NOTES["autonomous"] == AUTONOMOUS
    assert events(store, run.id, "say") == [{"message": "halfway there"}]
    assert events(store, run.id, "respond") == [{"message": "the answer is 42"}]
    said, asked, responded = tool_results(run)
    assert json.loads(said)["ok"] is True and json.loads(responded)["ok"] is True
    assert "autonomous mode: no human will answer" in json.loads(asked)["error"]
    assert not events(store, run.id, "ask") and run.wait_filter is None


def test_interactive_mode_asks_and_responds_until_the_agent_is_done(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("helper", 'loop_mode = "interactive"\n', HELPER)
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "helper"}).status_code == 202
    first = one_run(store, "helper", "waiting")
    assert first.wait_filter == {"type": "human", "kind": "ask", "question": "Which colour?"}
    assert MODE_NOTES["interactive"] in system_of(first)
    # Waiting for a human frees the slot (scale 1): a second run starts and asks too.
    assert sched.post("/control/run", {"agent": "helper"}).status_code == 202
    second = wait_until(
        lambda: [r for r in runs_of(store, "helper", "waiting") if r.id != first.id]
    )[0]
    stat = json.loads(project.al("stat", "--json", check=True).stdout)["agents"][0]
    assert (stat["active"], stat["waiting"]) == (0, 2)

    assert "delivered (ask)" in project.al("reply", first.id, "blue", check=True).stdout
    waiting_for(store, first.id, "respond")
    assert events(store, first.id, "respond") == [{"message": "You chose blue"}]
    project.al("reply", first.id, "nothing more", check=True)  # the human's next message
    waiting_for(store, first.id, "respond", 2)  # a plain-text answer counts as respond
    assert events(store, first.id, "respond")[1] == {
        "message": "Anything else? You said: nothing more"
    }
    project.al("reply", first.id, "bye", check=True)
    done = one_run(store, "helper", "done")
    assert done.id == first.id and done.reason == "the agent set its state to idle"
    humans = events(store, first.id, "human")
    assert humans == [{"answer": "blue"}, {"message": "nothing more"}, {"message": "bye"}]

    busy = project.al("reply", first.id, "too late")
    assert busy.returncode == 1 and "is not waiting for a human answer" in busy.stderr
    # `al say` to a run that waits for its answer is the answer.
    assert "delivered (ask)" in project.al("say", second.id, "green", check=True).stdout
    waiting_for(store, second.id, "respond")
    assert events(store, second.id, "respond") == [{"message": "You chose green"}]
    project.al("kill", second.id, check=True)


# ------------------------------------------------------------------ 9. talking to a run

WORKER = """
[[turns]]
tool_calls = [
  {{name = "bash", arguments = {{command = "touch {tmp}/started && sleep 30"}}}},
  {{name = "bash", arguments = {{command = "touch {tmp}/second"}}}},
]
[[turns]]
tool_calls = [{{name = "return_value", arguments = {{value = "{{{{ last_user }}}}"}}}}]
[[turns]]
text = "done"
"""


def test_al_say_interrupts_the_turn_and_becomes_the_next_input(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("worker", script=WORKER.format(tmp=tmp_path))
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "worker"}).status_code == 202
    wait_until(lambda: (tmp_path / "started").exists())
    run = one_run(store, "worker", "running")

    said = time.monotonic()
    result = project.al("say", run.id, "stop sleeping, plan B", check=True)
    assert "delivered (interrupt)" in result.stdout
    done = one_run(store, "worker", "done")
    assert time.monotonic() - said < 15, "the sleeping command was cut short"
    assert "stop sleeping, plan B" in done.return_value
    cut, skipped, *_ = tool_results(done)
    assert "cut short: a human interrupted this turn" in cut
    assert skipped.startswith("not run: a human interrupted this turn")
    assert not (tmp_path / "second").exists()
    assert events(store, done.id, "human") == [{"message": "stop sleeping, plan B", "via": "say"}]

    ended = project.al("say", run.id, "anyone?")
    assert ended.returncode == 1 and "there is nothing to talk to" in ended.stderr


def test_the_dashboards_reply_and_say_buttons(tmp_path, scheduler):
    pytest.importorskip("llamaherd_dashboard")
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("helper", 'loop_mode = "interactive"\n', HELPER)
    project.add_scripted_agent("worker", script=WORKER.format(tmp=tmp_path))
    sched = scheduler(project)
    store = project.store()
    browser = dashboard_browser(sched.url, sched.token)  # session cookies and CSRF token

    def page(run_id: str) -> tuple[str, str]:
        html = browser.get(f"{sched.url}/runs/{run_id}", timeout=10).text
        return html, re.search(r'name="csrf-token" content="([0-9a-f]+)"', html).group(1)

    assert sched.post("/control/run", {"agent": "helper"}).status_code == 202
    asking = one_run(store, "helper", "waiting")
    html, csrf = page(asking.id)
    assert f"/api/runs/{asking.id}/reply" in html and "Which colour?" in html
    url = f"{sched.url}/api/runs/{asking.id}/reply"
    assert browser.post(url, data={"csrf": "wrong", "text": "red"}, timeout=10).status_code == 403
    answer = browser.post(url, data={"csrf": csrf, "text": "red"}, allow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == f"/runs/{asking.id}"
    waiting_for(store, asking.id, "respond")
    assert events(store, asking.id, "respond") == [{"message": "You chose red"}]

    assert sched.post("/control/run", {"agent": "worker"}).status_code == 202
    wait_until(lambda: (tmp_path / "started").exists())
    working = one_run(store, "worker", "running")
    html, csrf = page(working.id)
    assert f"/api/runs/{working.id}/say" in html and "/reply" not in html
    url = f"{sched.url}/api/runs/{working.id}/say"
    answer = browser.post(url, data={"csrf": csrf, "text": "from the browser"}, timeout=10)
    assert answer.status_code == 200  # followed the redirect back to the run's page
    assert "from the browser" in one_run(store, "worker", "done").return_value


@pytest.mark.parametrize("through", ["scheduler", "foreground"])
def test_al_chat_is_an_interactive_manual_run_in_the_terminal(tmp_path, scheduler, through):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent(  # autonomous by config: al chat makes its run interactive
        "talker",
        script="""
        [[turns]]
        tool_calls = [{name = "ask", arguments = {question = "What is your name?"}}]
        [[turns]]
        tool_calls = [{name = "respond", arguments = {message = "Nice to meet you, {{ last_result }}."}}]
        """,
    )
    if through == "scheduler":
        scheduler(project)
    chat = subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), "chat", "talker",
         "hello", "there"],
        input="Ada\n/exit\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **project.env},
    )  # fmt: skip
    assert chat.returncode == 0, chat.stdout + chat.stderr
    lines = chat.stdout.replace("you> ", "").splitlines()
    assert "talker asks> What is your name?" in lines
    assert "talker> Nice to meet you, Ada." in lines
    store = project.store()
    (run,) = runs_of(store, "talker")
    assert (run.state, run.trigger_kind, run.trigger["source"]) == ("done", "manual", "chat")
    assert f"[run {run.id} done: conversation ended]" in lines
    assert MODE_NOTES["interactive"] in system_of(run)
    user = next(m for m in run.transcript if m.get("role") == "user")["content"]
    assert "first message:\n\nhello there" in user


def test_an_unanswered_ask_errors_and_an_unanswered_respond_ends_the_run(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent(
        "lonely",
        'loop_mode = "interactive"\nwaitTimeout = 1\n',
        """
        [[turns]]
        tool_calls = [{name = "ask", arguments = {question = "Anyone there?"}}]
        [[turns]]
        tool_calls = [{name = "respond", arguments = {message = "Alone: {{ last_result }}"}}]
        [[turns]]
        text = "never"
        """,
    )
    sched = scheduler(project)
    store = project.store()
    assert sched.post("/control/run", {"agent": "lonely"}).status_code == 202
    run = one_run(store, "lonely", "done")
    assert run.reason == "the human did not answer before the wait timed out"
    (responded,) = events(store, run.id, "respond")
    assert responded["message"] == "Alone: ask timed out: no human answered before its deadline"
    assert tool_results(run)[0] == "ask timed out: no human answered before its deadline"
    assert len([m for m in run.transcript if m["role"] == "assistant"]) == 2

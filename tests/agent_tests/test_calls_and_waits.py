"""A test run's calls to other agents are answered by the case, and its waits by the case's
events; `al record` writes both from a production run."""

from __future__ import annotations

import json

PLANNER = """
[[turns]]
tool_calls = [{ name = "call_agent", arguments = { target_agent = "worker", context = "compute the answer" } }]
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "al-subagent-wait 1 60" } }]
[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = "{{ last_result }}" } }]
[[turns]]
text = "Got it."
"""
WORKER = """
[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = { answer = 42 } } }]
[[turns]]
text = "Done."
"""


def test_a_recorded_call_is_answered_by_the_case_and_the_callee_never_runs(project):
    project.add_scripted_agent("planner", "", PLANNER)
    project.add_scripted_agent("worker", "", WORKER)
    ran = project.al("run", "planner")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    store = project.store()
    try:
        [run] = store.runs(agent="planner", limit=5)
    finally:
        store.close()
    assert '"answer": 42' in str(run.return_value)
    recorded = project.al("record", run.id, "--name", "calls")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    case = (project.root / "agents" / "planner" / "tests" / "calls.toml").read_text()
    assert '[[calls]]\nagent = "worker"\nreturn = {answer = 42}' in case
    assert '[[expect.calls]]\nagent = "worker"' in case

    tested = project.al("test", "planner", "--json")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    [result] = json.loads(tested.stdout)["cases"]
    assert '"answer": 42' in str(result["run"]["return_value"])
    # The worker ran once, in production; the test answered the call itself.
    store = project.store()
    try:
        assert len(store.runs(agent="worker", limit=5)) == 1
    finally:
        store.close()

    case_file = project.root / "agents" / "planner" / "tests" / "calls.toml"
    case_file.write_text(case.replace("return = {answer = 42}", 'error = "worker is down"'))
    failed = project.al("test", "planner")
    assert failed.returncode == 1
    assert "expect.return" in failed.stdout and "worker is down" in failed.stdout


WAITER = """
[[turns]]
tool_calls = [{ name = "wait_for_trigger", arguments = { filter = { type = "agent", from = "planner" }, timeout = "5m" } }]
[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = "{{ last_result }}" } }]
[[turns]]
text = "done"
"""


def test_a_wait_gets_the_cases_event_or_times_out_at_once(project):
    project.add_scripted_agent("waiter", "", WAITER)
    case = """
    [trigger]
    kind = "manual"
    [model]
    live = true
    {events}
    [expect]
    transitions = ["running", "waiting", "running", "done"]
    return = {{ contains = "{returned}" }}
    [[expect.waits]]
    filter = {{ type = "agent", from = "planner" }}
    """
    event = '[[events]]\nkind = "agent"\ncaller = "planner"\ncontext = "the go-ahead"'
    project.write(
        "agents/waiter/tests/answered.toml", case.format(events=event, returned="the go-ahead")
    )
    project.write(
        "agents/waiter/tests/unanswered.toml", case.format(events="", returned="timed out")
    )
    wrong = '[[events]]\nkind = "agent"\ncaller = "someone-else"'
    project.write("agents/waiter/tests/wrong.toml", case.format(events=wrong, returned="timed out"))
    tested = project.al("test", "waiter", "--json")
    found = {c["case"]: c for c in json.loads(tested.stdout)["cases"]}
    assert found["answered"]["outcome"] == "passed", found["answered"]
    assert found["unanswered"]["outcome"] == "passed", found["unanswered"]
    # An event the wait does not take is the case's mistake: said, and the wait times out.
    [failure] = found["wrong"]["failures"]
    assert failure["where"] == "events[0]" and "did not match the run's wait" in failure["message"]
    assert tested.returncode == 1

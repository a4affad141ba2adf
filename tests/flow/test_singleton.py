"""Singleton by key through a real scheduler: a second delivery for a pull request while its run
works cancels it (``superseded``), is skipped (recorded), or reaches it as a message."""

from __future__ import annotations

from llamaherd.testing import wait_until

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "while [ ! -e '{{ payload.payload.gate }}' ]; do sleep 0.05; done; echo released {{ payload.payload.seq }}" } }]

[[turns]]
text = "done with {{ payload.payload.seq }}"
"""


def reviewer(mode: str) -> str:
    return f"""
webhooks = [{{ source = "github", events = ["pull_request"] }}]

[flow]
key = "pull_request.number"
singleton = {{ mode = "{mode}" }}
"""


def gated(kit, number, seq, gate):
    return {**kit.pull_request(number, seq), "gate": str(gate)}


def running(runs_of, project):
    return [r for r in runs_of(project) if r.state == "running"]


def test_cancel_supersedes_the_active_run_and_runs_the_newest(
    project, start, runs_of, kit, tmp_path
):
    project.add_scripted_agent("reviewer", reviewer("cancel"), script=SCRIPT)
    scheduler = start(project)
    kit.deliver(scheduler.url, gated(kit, 7, 1, tmp_path / "never"), event="pull_request")
    [first] = wait_until(lambda: running(runs_of, project), what="the first run working")
    open_gate = tmp_path / "open"
    open_gate.touch()
    response = kit.deliver(scheduler.url, gated(kit, 7, 2, open_gate), event="pull_request")
    assert response.json()["queued"] == ["reviewer"]
    # The first run was ended before the delivery was answered; its sandbox goes at once.
    ended = next(r for r in runs_of(project) if r.id == first.id)
    assert ended.state == "killed" and ended.reason.startswith("superseded"), ended.reason
    done = wait_until(
        lambda: [r for r in runs_of(project) if r.state == "done"], what="the newest running"
    )
    assert [r.trigger["payload"]["payload"]["seq"] for r in done] == [2]
    assert len(runs_of(project)) == 2, "the superseded run is not rerun"
    table = project.al("runs", "reviewer", check=True, env={"COLUMNS": "300"}).stdout
    assert "superseded" in table


def test_skip_records_the_trigger_for_a_busy_key_and_runs_nothing_more(
    project, start, runs_of, kit, tmp_path
):
    project.add_scripted_agent("reviewer", reviewer("skip"), script=SCRIPT)
    scheduler = start(project)
    gate = tmp_path / "gate"
    kit.deliver(scheduler.url, gated(kit, 7, 1, gate), event="pull_request")
    wait_until(lambda: running(runs_of, project), what="the first run working")
    second = kit.deliver(scheduler.url, gated(kit, 7, 2, gate), event="pull_request")
    assert second.json()["queued"] == []
    [skip] = kit.agent_events(project, "reviewer", "trigger.skipped")
    assert "busy" in skip["data"]["reason"] and skip["data"]["key"] == "7"
    # Another pull request is another key: it runs beside the first.
    kit.deliver(scheduler.url, gated(kit, 8, 3, gate), event="pull_request")
    gate.touch()
    wait_until(lambda: len([r for r in runs_of(project) if r.state == "done"]) == 2)
    assert sorted(r.trigger["payload"]["number"] for r in runs_of(project)) == [7, 8]
    table = project.al("runs", "reviewer", check=True, env={"COLUMNS": "300"}).stdout
    assert "skipped" in table and "busy" in table


def test_interrupt_hands_the_newest_payload_to_the_active_run(
    project, start, runs_of, kit, tmp_path
):
    project.add_scripted_agent("reviewer", reviewer("interrupt"), script=SCRIPT)
    scheduler = start(project)
    gate = tmp_path / "gate"
    kit.deliver(scheduler.url, gated(kit, 7, 1, gate), event="pull_request")
    [run] = wait_until(lambda: running(runs_of, project), what="the run working")
    second = kit.deliver(scheduler.url, gated(kit, 7, 2, gate), event="pull_request")
    assert second.json()["queued"] == []
    gate.touch()
    [done] = wait_until(lambda: [r for r in runs_of(project) if r.state == "done"])
    assert done.id == run.id and len(runs_of(project)) == 1, "one run, no second"
    users = [m["content"] for m in done.transcript if m.get("role") == "user"]
    assert len(users) == 2, users
    assert "A newer trigger for the key you are working on ('7')" in users[1]
    assert '"seq": 2' in users[1]
    assert done.trigger["payload"]["payload"]["seq"] == 2, "a requeue would run the newest"

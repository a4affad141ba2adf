"""`al logs`: a run reads like a conversation, long output is cut out loud (`--full` shows it
all), terminal escapes never reach the terminal, and the scheduler's own log (run starts and
ends, webhook receipts) in text or JSON. Real runs of the scripted provider."""

from __future__ import annotations

import json
import re

from llamaherd.testing import wait_until

# The tool prints 500 numbered lines, then a line that tries to recolour the terminal and
# set its title (CSI and OSC sequences).
NOISY = r"""
[[turns]]
text = "Counting to 500."
tool_calls = [{name = "bash", arguments = {command = "seq -f 'line %g' 1 500; printf '\\033[31mred\\033]0;pwned\\007 tail\\n'"}}]
[[turns]]
tool_calls = [{name = "set_status", arguments = {text = "counted"}}]
[[turns]]
text = "Done counting."
"""

ESC = "\x1b"


def _run_noisy(project) -> str:
    project.add_scripted_agent("counter", script=NOISY)
    project.al("run", "counter", check=True)
    return project.store().runs(agent="counter", limit=1)[0].id


def test_a_long_output_is_cut_out_loud_and_full_shows_all_500_lines(project):
    run_id = _run_noisy(project)
    view = project.al("logs", run_id, check=True).stdout
    numbered = re.findall(r"^\s+line (\d+)$", view, re.MULTILINE)
    assert 0 < len(numbered) < 50 and numbered[0] == "1" and numbered[-1] == "500"
    cut = re.search(r"… (\d+) more lines \(`al logs (\S+) --full` shows all\) …", view)
    assert cut and int(cut.group(1)) == 500 - len(numbered) and cut.group(2) == run_id
    # A conversation: the assistant's words, then the command the tool ran.
    assert re.search(r"assistant\s+Counting to 500\.", view)
    assert re.search(r"tool\s+\$ seq -f 'line %g' 1 500", view)
    assert "null" not in view and "set_status" not in view  # the status line says it

    full = project.al("logs", "counter", "--full", check=True).stdout
    assert re.findall(r"^\s+line (\d+)$", full, re.MULTILINE) == [str(i) for i in range(1, 501)]
    assert "more lines" not in full


def test_escape_sequences_never_reach_the_terminal_and_json_keeps_them(project):
    run_id = _run_noisy(project)
    for args in (("logs", run_id), ("logs", run_id, "--full"), ("runs",)):
        out = project.al(*args, check=True).stdout
        assert ESC not in out and "\x07" not in out, args
    assert re.search(r"^\s+red tail$", project.al("logs", run_id).stdout, re.MULTILINE)
    raw = [json.loads(line) for line in project.al("logs", run_id, "--json").stdout.splitlines()]
    outputs = [e["data"]["output"] for e in raw if e["type"] == "tool_call"]
    assert any(f"{ESC}[31mred" in out and out.count("\n") >= 500 for out in outputs)


def test_n_since_and_grep_select_entries(project):
    run_id = _run_noisy(project)
    events = project.al("logs", run_id, "--json", check=True).stdout.splitlines()
    last_two = project.al("logs", run_id, "--json", "-n", "2").stdout.splitlines()
    assert last_two == events[-2:]
    grep = project.al("logs", run_id, "--grep", "Done counting", check=True).stdout
    assert grep.count("\n") == 1 and "Done counting." in grep
    assert project.al("logs", run_id, "--since", "1h", "--json").stdout.splitlines() == events
    assert project.al("logs", run_id, "--before", "1h", "--json").stdout == ""
    assert project.al("logs", run_id, "--since", "2000-01-01T00:00", "--json").stdout
    bad = project.al("logs", run_id, "--since", "last tuesday")
    assert bad.returncode == 2 and "--since" in bad.stderr and "ISO" in bad.stderr
    assert project.al("logs", run_id, "--grep", "(").returncode == 2


def test_scheduler_log_records_runs_and_webhooks_in_json(project, scheduler, al):
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            '\n[log]\nformat = "json"\n\n[webhooks.hook]\ntype = "generic"\nallowUnsigned = true\n'
        )
    project.add_scripted_agent(
        "greeter",
        config='[[webhooks]]\nsource = "hook"\n',
        script='[[turns]]\ntext = "hi"\n',
    )
    sched = scheduler(project)
    sent = sched.http.post(f"{sched.url}/webhooks/hook", json={"event": "ping", "n": 1})
    assert sent.status_code < 300, sent.text
    project.wait_run(lambda runs: [r for r in runs if r.state == "done"])
    log = project.root / ".al" / "scheduler.log"
    assert log.stat().st_mode & 0o077 == 0

    def entries() -> list[dict]:
        out = project.al("logs", "--json", "-n", "500", check=True).stdout
        return [json.loads(line) for line in out.splitlines()]

    found = wait_until(
        lambda: (e := entries()) and any(" done (exit 0)" in x["message"] for x in e) and e,
        what="the run's end in the scheduler log",
    )
    messages = [e["message"] for e in found]
    assert all({"time", "at", "level", "logger", "message"} <= e.keys() for e in found)
    assert any(re.search(r"webhook hook: delivery \S+ .*queued for greeter", m) for m in messages)
    assert any(re.search(r"run greeter-\S+ of greeter started \(webhook", m) for m in messages)
    view = project.al("logs", "--grep", "greeter", check=True).stdout
    assert "INFO llamaherd.runner: run greeter-" in view and "{" not in view

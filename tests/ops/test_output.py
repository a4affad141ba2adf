"""Output scripts can trust: piped tables are one record per line with one header style, a
terminal cuts with an ellipsis instead of folding, and lists and statuses have ``--json``."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys

FAILING_HOOK = (
    '[hooks]\npre = ["echo this hook fails on purpose, with a reason long enough to fold '
    'any table cell it lands in; exit 7"]\n'
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _failed_run(project) -> str:
    project.add_scripted_agent("hooked", FAILING_HOOK)
    assert project.al("run", "hooked").returncode == 1
    return json.loads(project.al("runs", "--json", check=True).stdout)[0]["id"]


def test_piped_tables_are_one_record_per_line_with_one_header_style(project):
    run_id = _failed_run(project)
    runs = project.al("runs", check=True).stdout.splitlines()
    assert len(runs) == 2 and runs[1].startswith(run_id) and runs[1].endswith("it lands in")
    listings = {
        "runs": runs,
        "stat": project.al("stat", check=True).stdout.splitlines()[2:],  # below 2 status lines
        "creds types": project.al("creds", "types", check=True).stdout.splitlines(),
        "plugins": project.al("plugins", check=True).stdout.splitlines(),
    }
    for command, lines in listings.items():
        header = lines[0].split()
        assert header == [word.upper() for word in header] and header[0].isalpha(), command
        assert all(line == line.rstrip() for line in lines), f"al {command}: trailing spaces"
        assert not any(ANSI.search(line) for line in lines), f"al {command}: colours in a pipe"
    types = listings["creds types"][1:]
    assert any(line.split()[0] == "cloudflare_api_token" for line in types)
    assert all(line.split()[0].islower() for line in types)  # no folded remainder lines


def _in_terminal(project, columns: int, *args: str) -> list[str]:
    """``al ARGS`` in a pseudo-terminal ``columns`` wide: its lines, colours removed."""
    controller, terminal = pty.openpty()
    command = [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args]
    env = {**os.environ, **project.env, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen(command, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    os.close(controller)
    assert proc.wait(60) == 0, out
    return ANSI.sub("", out.decode()).splitlines()


def test_in_a_terminal_long_cells_are_cut_with_an_ellipsis_and_ids_kept_whole(project):
    run_id = _failed_run(project)
    lines = _in_terminal(project, 70, "runs")
    assert len(lines) == 2 and all(len(line) <= 70 for line in lines)
    assert lines[1].startswith(run_id) and lines[1].rstrip().endswith("…")


def test_validate_json_lists_findings_with_file_key_message_and_severity(project):
    project.add_scripted_agent("good")
    project.add_scripted_agent("bad", "scael = 2\n")
    result = project.al("validate", "--json")
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["ok"] is False
    [finding] = [f for f in report["findings"] if f["severity"] == "error"]
    assert finding["file"] == "agents/bad/config.toml" and finding["key"] == "scael"
    assert "unknown key" in finding["message"] and finding["agent"] == "bad"
    assert {a["agent"]: a["ok"] for a in report["agents"]} == {"bad": False, "good": True}
    good = json.loads(project.al("validate", "good", "--json", check=True).stdout)
    assert good["ok"] is True and good["agents"] == [{"agent": "good", "ok": True}]

    project.config("[models.x\n")
    broken = project.al("validate", "--json")
    assert broken.returncode == 2
    [finding] = json.loads(broken.stdout)["findings"]
    assert finding["file"].endswith("config.toml") and finding["severity"] == "error"


def test_state_json(project):
    project.add_scripted_agent("sleepy")
    state = json.loads(project.al("state", "sleepy", "--json", check=True).stdout)
    assert state == {
        "agent": "sleepy",
        "state": "idle",
        "shown": "idle",
        "cause": None,
        "since": None,
    }
    change = json.loads(project.al("state", "sleepy", "off", "--json", check=True).stdout)
    assert (change["previous"], change["state"], change["killed"]) == ("idle", "off", [])
    now = json.loads(project.al("state", "sleepy", "--json", check=True).stdout)
    assert now["state"] == "off" and now["cause"] == "set with `al state`"


def test_stat_watch_in_a_narrow_terminal_wraps_its_header_without_cutting_the_url(
    project, scheduler
):
    project.add_scripted_agent("quick")
    running = scheduler(project)
    controller, terminal = pty.openpty()
    command = [sys.executable, "-m", "llamaherd", "--project", str(project.root), "stat", "--watch"]
    env = {**os.environ, **project.env, "COLUMNS": "60", "TERM": "xterm"}
    proc = subprocess.Popen(command, stdout=terminal, stderr=terminal, env=env)
    os.close(terminal)
    out = b""
    try:
        while b"Queue depth" not in out:
            ready, _, _ = select.select([controller], [], [], 30)
            assert ready, f"no view within 30 s: {out!r}"
            out += os.read(controller, 65536)
    finally:
        proc.kill()
        proc.wait(10)
        os.close(controller)
    lines = ANSI.sub("", out.decode()).splitlines()
    assert any(running.url in line for line in lines), lines  # whole, on one line
    assert all(len(line.rstrip()) <= 60 for line in lines)

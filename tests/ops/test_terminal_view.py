"""The terminal view: `al start` in a terminal draws it below the log lines, `al stat --watch`
draws the same from another terminal, and without a terminal (or with --headless) `al start`
prints plain log lines."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console

from llamaherd.testing import wait_until

SLOW = """
[[turns]]
tool_calls = [{ name = "set_status", arguments = { text = "triaging issue 7" } }]

[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "sleep 60" } }]
"""
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def herd(project):
    project.add_scripted_agent("slow", script=SLOW)
    project.add_scripted_agent("quick")
    project.add_scripted_agent("spare", "scale = 2\n")
    return project


def drawn(project, agent=None) -> str:
    """The view of ``project`` as a 160-column terminal shows it."""
    from llamaherd.readers import StoreReader
    from llamaherd.termview import render, snapshot

    store = project.store()
    try:
        view = snapshot(StoreReader(store, project.load(), _registry()), agent)
    finally:
        store.close()
    console = Console(record=True, width=160, force_terminal=True, color_system="truecolor")
    console.print(render(view))
    return console.export_text()


def _registry():
    from llamaherd.plugins import registry

    return registry()


def test_the_view_shows_agents_active_runs_with_status_recent_results_and_queue(herd, scheduler):
    running = scheduler(herd)
    assert herd.al("run", "quick").returncode == 0
    assert herd.al("pause", "spare").returncode == 0
    for _ in range(3):
        assert running.post("/control/run", {"agent": "spare"}).status_code == 202
    assert running.post("/control/run", {"agent": "slow"}).status_code == 202
    slow = herd.wait_run(
        lambda runs: next((r for r in runs if r.agent == "slow" and r.status), None)
    )

    text = drawn(herd)
    assert "scheduler up since" in text and "config current" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    assert rows["spare"][1:4] == ["paused", "0/2", "3"]  # state, active/scale, queued
    assert rows["slow"][1:3] == ["active", "1/1"]
    active = next(line for line in text.splitlines() if line.startswith(slow.id))
    assert "slow" in active and "running" in active and "triaging issue 7" in active
    quick = [line for line in text.splitlines() if "quick" in line and "done" in line]
    assert len(quick) == 2  # its agent row (last result) and its recent result
    assert "Queue depth: 3 item(s) waiting" in text

    only = drawn(herd, "quick")
    assert "slow" not in only and "Active runs (0)" in only


def test_without_a_scheduler_the_view_says_so_and_shows_no_next_fire(project):
    project.add_scripted_agent("tick", 'every = "1h"\n')
    text = drawn(project)
    assert "no scheduler is running" in text
    assert not re.search(r"\bin \d+[smhd]\b", text)


def test_not_in_a_terminal_al_start_prints_plain_log_lines(herd, scheduler):
    running = scheduler(herd)  # stdout and stderr are a file
    assert herd.al("run", "quick").returncode == 0
    log = running.read_log()
    assert "listening on" in log
    assert "Active runs" not in log and not ANSI.search(log)


class Terminal:
    """A command on a pseudo-terminal (80x40): everything it drew, escape sequences removed."""

    def __init__(self, args: list[str], env: dict[str, str]):
        master, slave = pty.openpty()
        os.set_blocking(master, False)
        self.master = master
        self.proc = subprocess.Popen(
            args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, **env, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"},
            start_new_session=True,
        )
        os.close(slave)
        self.raw = b""

    def read(self) -> str:
        while self.master >= 0 and select.select([self.master], [], [], 0.05)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            self.raw += chunk
        return ANSI.sub("", self.raw.decode(errors="replace"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


@pytest.fixture
def terminal(herd):
    opened: list[Terminal] = []

    def open_(*args: str) -> Terminal:
        command = [sys.executable, "-m", "llamaherd", "--project", str(herd.root), *args]
        opened.append(Terminal(command, herd.env))
        return opened[-1]

    yield open_
    for term in opened:
        term.close()


def test_in_a_terminal_al_start_shows_the_live_view_and_stat_watch_the_same(herd, terminal):
    start = terminal("start", "--grace", "5")
    wait_until(lambda: "Active runs" in start.read(), 30, what="the live view")
    wait_until(lambda: "scheduler up since" in start.read(), 30, what="the scheduler line")
    # Its agents are read after it listens: the view lists them once they are.
    wait_until(lambda: "quick" in start.read(), 30, what="the agent in the view")
    assert "Queue depth" in start.read()
    assert herd.al("run", "quick").returncode == 0
    # Log lines scroll above the view, which keeps being redrawn with the new result.
    wait_until(lambda: "listening on" in start.read(), 30, what="a log line")
    wait_until(lambda: re.search(r"quick\s+done\s+0", start.read()), 30, what="the recent result")

    watch = terminal("stat", "--watch")
    wait_until(lambda: "Recent results" in watch.read(), 30, what="stat --watch's view")
    wait_until(lambda: re.search(r"quick\s+done\s+0", watch.read()), 30, what="the result")
    start.close()
    assert start.proc.returncode == 0


def test_headless_in_a_terminal_prints_plain_log_lines(herd, terminal):
    start = terminal("start", "--headless", "--grace", "5")
    wait_until(lambda: "listening on" in start.read(), 30, what="a log line")
    time.sleep(1.5)  # a view would have drawn by now (it redraws every second)
    assert "Active runs" not in start.read()


def test_stat_watch_into_a_pipe_prints_the_view_again_and_again(herd):
    command = [sys.executable, "-m", "llamaherd", "--project", str(herd.root), "stat", "--watch"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, env={**os.environ, **herd.env}, text=True
    )
    try:
        seen = []
        while len(seen) < 2:
            line = proc.stdout.readline()
            assert line, "stat --watch ended"
            if line.startswith("Queue depth"):
                seen.append(line)
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdout.close()
    assert seen == ["Queue depth: 0 item(s) waiting\n"] * 2


def test_what_an_agent_wrote_reaches_the_terminal_without_escapes():
    from llamaherd.termview import render

    hostile = "ok\x1b]0;pwned\x07\x1b[2J done"
    run = {"id": "r1", "agent": "a", "state": "running", "started_at": 1.0, "finished_at": None}
    run |= {"trigger_kind": "manual", "status": hostile, "exit_code": None, "reason": None}
    ended = {**run, "id": "r2", "state": "error", "finished_at": 2.0, "reason": hostile}
    scheduler = {"running": False, "config_current": None}
    view = {"scheduler": scheduler, "agents": [], "active": [run], "recent": [ended]}
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    console.print(render(view, now=3.0))
    out = console.file.getvalue()
    assert out.count("ok done") == 2  # the status and the reason, their escapes gone
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x07" not in out

"""The exit-code contract of every `al` command (docs/cli.md, "Exit status"): 0 success; 1 the
operation failed (a run failed, a server is unreachable, a port is in use, the current state
refuses it); 2 a usage or configuration error (what was typed or written is wrong).

One parametrized test. Its cases are every command the CLI registers (core's and every
installed plugin's, found from the CLI itself, so a new command is covered without a word
here), each with `--help` (0) and an unknown option (2); then the scenarios below, each a
command line on a real project as a user types it."""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject

OK, FAILED, USAGE = 0, 1, 2
FAILING_HOOK = '[hooks]\npre = ["exit 3"]\n'


# Run in a process of its own: loading every command adds options to shared command objects,
# which other tests of this worker (the CLI reference) must not see. It answers, for every
# command and subcommand the CLI registers, the exit codes of `--help` and of an unknown option.
EVERY_COMMAND = """
import json
import click
from click.testing import CliRunner
from llamaherd.cli import cli, load_all

def paths(group, prefix=()):
    ctx = click.Context(group, info_name="al")
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from paths(command, (*prefix, name))

load_all(cli)
runner = CliRunner()
print(json.dumps({
    " ".join(path): [runner.invoke(cli, [*path, option]).exit_code
                     for option in ("--help", "--no-such-option")]
    for path in paths(cli)
}))
"""


@functools.cache
def every_command() -> dict[str, list[int]]:
    done = subprocess.run(
        [sys.executable, "-c", EVERY_COMMAND], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@dataclass
class Case:
    """``al ARGS`` in ``setup``'s project exits ``code``; ``in_process``: through click's
    runner in ``EVERY_COMMAND``'s process (no project needed: help and usage)."""

    args: tuple[str, ...]
    code: int
    setup: Callable[[OfflineProject], None] = field(default=lambda project: None)
    in_process: bool = False

    @property
    def id(self) -> str:
        setup = getattr(self.setup, "__name__", "")
        return " ".join(self.args) + (f" ({setup.strip('_')})" if setup.startswith("_") else "")


def _generated() -> list[Case]:
    cases = []
    for path in every_command():
        cases.append(Case((*path.split(), "--help"), OK, in_process=True))
        cases.append(Case((*path.split(), "--no-such-option"), USAGE, in_process=True))
    return cases


def _busy_port(project: OfflineProject) -> None:
    """``[gateway] port`` of ``project`` set to a port something listens on."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    _HELD.append(taken)
    config = project.root / "config.toml"
    config.write_text(config.read_text().replace("port = 0", f"port = {taken.getsockname()[1]}"))


_HELD: list[socket.socket] = []


def _agent(project: OfflineProject) -> None:
    project.add_scripted_agent("worker")


def _failing_agent(project: OfflineProject) -> None:
    project.add_scripted_agent("worker", FAILING_HOOK)


def _off(project: OfflineProject) -> None:
    project.add_scripted_agent("worker")
    project.al("state", "worker", "off", check=True)


def _broken_config(project: OfflineProject) -> None:
    project.add_scripted_agent("worker")
    config = project.root / "config.toml"
    config.write_text("maxRerunz = 3\n" + config.read_text())


def _unreachable_environment(project: OfflineProject) -> None:
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()  # nothing listens there now
    project.al("env", "add", "down", "--host", "127.0.0.1", "--port", str(free), check=True)


SCENARIOS = [
    # usage: an unknown name, a bad value
    Case(("run", "nobody"), USAGE, _agent),
    Case(("logs", "no-such-run"), USAGE, _agent),
    Case(("stats", "--since", "last tuesday"), USAGE, _agent),
    Case(("state", "nobody"), USAGE, _agent),
    Case(("creds", "rm", "github_token:nothing"), USAGE),
    # configuration: the project's files are wrong
    Case(("validate",), USAGE, _broken_config),
    Case(("run", "worker"), USAGE, _broken_config),
    Case(("start", "--headless"), USAGE, _broken_config),
    Case(("start", "--detach"), USAGE, _broken_config),
    # the operation failed
    Case(("run", "worker"), FAILED, _failing_agent),
    Case(("run", "worker"), FAILED, _off),  # the agent's state refuses it
    Case(("start", "--headless"), FAILED, _busy_port),
    Case(("start", "--detach"), FAILED, _busy_port),
    Case(("stop",), FAILED, _agent),  # no scheduler to stop
    Case(("kill", "worker"), FAILED, _agent),
    Case(("env", "check", "down"), FAILED, _unreachable_environment),
    # success
    Case(("run", "worker"), OK, _agent),
    Case(("validate",), OK, _agent),
]


@pytest.mark.parametrize("case", _generated() + SCENARIOS, ids=lambda case: case.id)
def test_exit_code(case: Case, tmp_path: Path) -> None:
    if case.in_process:
        *path, option = case.args
        codes = every_command()[" ".join(path)]
        assert codes[option == "--no-such-option"] == case.code, (case.args, codes)
        return
    if case.args[0] not in every_command():
        pytest.skip(f"`al {case.args[0]}` is not installed here")
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=90)
    project.env["AL_ENVIRONMENTS_DIR"] = str(tmp_path / "envs")
    try:
        case.setup(project)
        result = subprocess.run(
            [sys.executable, "-m", "llamaherd", "--project", str(project.root), *case.args],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, **project.env},
            stdin=subprocess.DEVNULL,
        )
    finally:
        while _HELD:
            _HELD.pop().close()
        project.al("stop")  # a scheduler a case started by mistake
    assert result.returncode == case.code, result.stdout + result.stderr
    if case.code:  # and it says why, without a traceback
        assert "Traceback" not in result.stderr and (result.stdout + result.stderr).strip()


def test_al_start_detached_on_a_broken_project_says_what_al_start_says(tmp_path: Path) -> None:
    """Issue 42 item 7: the same exit code (2) and the same lines on stderr (each config error,
    then why it stopped; only the times, the process id and the port differ), never "listed
    above" with nothing above."""
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=90)
    _broken_config(project)
    (project.root / "agents/worker/config.toml").write_text(
        (project.root / "agents/worker/config.toml").read_text() + 'schedule = "0 25 * * *"\n'
    )

    def said(*args: str) -> tuple[int, list[str]]:
        result = project.al("start", *args)
        lines = [
            re.sub(r"^\S+ \S+ (ERROR|WARNING) \S+: ", "", line)
            for line in result.stderr.splitlines()
        ]
        # It listens before it reads its agents: "up on URL: loading its agents", then
        # "stopped", each with its host id (machine:pid) and port.
        return result.returncode, [
            re.sub(r"\d+", "N", line) if " INFO " in line else line
            for line in (re.sub(r"^scheduler \S+ starting", "scheduler starting", x) for x in lines)
        ]

    foreground, detached = said("--headless"), said("--detach")
    assert foreground == detached
    code, lines = detached
    assert code == USAGE
    assert 'config.toml: maxRerunz: unknown key (did you mean "maxReruns"?)' in lines
    assert "agents/worker/config.toml: schedule: hour 25 is out of range 0-23" in lines
    assert (
        lines[-1]
        == "error: the project config has errors (listed above); fix them, then `al validate`"
    )

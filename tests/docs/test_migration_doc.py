"""docs/migrating-from-action-llama.md holds: every command of its console blocks runs, in
order, on a project of Action Llama's layout with an agent ``dev`` (``al start`` in the
background); every ``al ...`` it names outside the "Action Llama" column of its table (which
describes Action Llama) is a command ``al`` has, with the options it names."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from llamaherd.testing import OfflineProject

from .conftest import DOCS

PAGE = (DOCS / "migrating-from-action-llama.md").read_text()
CONSOLE = re.compile(r"```console\n(.*?)```", re.DOTALL)
# `al ...` in code spans; a span may hold alternatives (`al creds add|rm|ls|types`).
SPAN = re.compile(r"`(al [^`]+)`")


def console_commands() -> list[list[str]]:
    """Every ``$ ...`` line of the page's console blocks, as argv (comments dropped)."""
    found = []
    for block in CONSOLE.findall(PAGE):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append(shlex.split(line[2:], comments=True))
    return found


def test_every_console_command_runs(tmp_path: Path, al) -> None:
    project = OfflineProject(tmp_path / "my-action-llama-project", timeout=120)
    project.add_scripted_agent("dev")
    commands = console_commands()
    assert len(commands) > 10
    started = False
    try:
        for argv in commands:
            if argv[0] == "cd":
                continue  # every command runs in the project
            assert argv[0] == "al", argv
            args = argv[1:]
            if args == ["start"]:  # the foreground scheduler, here in the background
                args, started = ["start", "--detach", "--port", "0"], True
            result = al(*args, cwd=project.root, env=project.env, timeout=120)
            assert result.returncode == 0, (argv, result.stdout, result.stderr)
    finally:
        if started:
            al("stop", cwd=project.root, env=project.env)


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command a span names, and the words after its name."""
    from llamaherd.cli import cli, load_all

    load_all(cli)
    command: click.Command = cli
    rest = list(words)
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    return command, rest


def spans() -> list[str]:
    """The ``al ...`` spans of the prose and of every table cell but the first of a row."""
    found = set()
    for line in PAGE.splitlines():
        if line.startswith("| "):
            line = "|".join(re.split(r"(?<!\\)\|", line)[2:])
        found.update(SPAN.findall(line))
    return sorted(found)


@pytest.mark.parametrize("span", spans())
def test_every_named_command_exists_with_its_options(span: str) -> None:
    for alternative in _alternatives(span):
        words = alternative.split()[1:]
        command, rest = _resolve(words)
        assert command.name != "cli", f"`{span}`: no command {words[0]!r}"
        if isinstance(command, click.Group):
            assert not rest or not rest[0].islower(), f"`{span}`: no subcommand {rest[0]!r}"
        accepted = {opt for param in command.params for opt in param.opts + param.secondary_opts}
        for word in rest:
            for option in _options(word):
                assert option in accepted, f"`{span}`: `al {command.name}` has no {option}"


def _alternatives(span: str) -> list[str]:
    """``al creds add|rm|ls`` as ``al creds add``, ``al creds rm``, ``al creds ls``."""
    words = span.split()
    for i, word in enumerate(words):
        if "|" in word and not word.startswith("-") and "/" not in word:
            return [" ".join([*words[:i], choice, *words[i + 1 :]]) for choice in word.split("|")]
    return [span]


def _options(word: str) -> list[str]:
    """The option names in a word: ``-n``, ``--lines``, ``-H/-w/-e/--port``."""
    if not word.startswith("-"):
        return []
    return [part.split("=")[0] for part in word.split("/") if part.startswith("-")]

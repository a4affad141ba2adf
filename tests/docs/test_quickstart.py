"""Every ``console`` block of docs/quickstart.md runs as shown: each ``$ command`` is run in
order (in a temporary directory for ``/tmp/demo``), must exit 0, and its output (stdout) must
have the shape the page shows: the same lines, where numbers, times, run ids and ages may
differ, and ``...`` stands for any lines. Blocks a reader cannot run as they are (a prompt for a
key, a project of their own) are ``shell`` blocks, which are not run."""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import DOCS

QUICKSTART = DOCS / "quickstart.md"
RUN_ID = re.compile(r"\b[a-z][a-z0-9_.-]*-[0-9a-f]{8}\b")
# What may differ from the page in a line of output (run ids, clock times, ages, numbers, the
# padding of table columns), and what each matches.
VARIABLE = re.compile(
    r"(?P<id>\b[a-z][a-z0-9_.-]*-[0-9a-f]{8}\b)|(?P<clock>\d\d:\d\d:\d\d)"
    r"|(?P<age>\d+[smhd] ago)|(?P<number>\d[\d,]*(?:\.\d+)?)|(?P<padding> {2,})"
)
GENERAL = {
    "id": RUN_ID.pattern,
    "clock": r"\d\d:\d\d:\d\d",
    "age": r"\d+[smhd] ago",
    "number": r"\d[\d,]*(?:\.\d+)?",
    "padding": r"\s+",
}


def console_blocks(text: str) -> list[list[tuple[str, list[str]]]]:
    """Each ```console block: its commands, each with the output lines shown under it."""
    blocks = []
    for body in re.findall(r"^```console\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        steps: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
        blocks.append(steps)
    return blocks


def shape(line: str) -> re.Pattern[str]:
    """A line of the page as a pattern: its variable parts (``VARIABLE``) match any value."""
    line = line.rstrip()
    parts, last = [], 0
    for found in VARIABLE.finditer(line):
        parts += [re.escape(line[last : found.start()]), GENERAL[found.lastgroup or ""]]
        last = found.end()
    return re.compile("".join([*parts, re.escape(line[last:])]) + r"\s*")


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` has the shape of ``shown`` (``...``: any lines, none included)."""
    if not shown:
        return not printed
    if shown[0] == "...":
        return any(matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return (
        bool(printed)
        and bool(shape(shown[0]).fullmatch(printed[0]))
        and matches(shown[1:], printed[1:])
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def offline() -> None:
    from llamaherd.plugins import registry

    if "scripted" not in registry().providers or "host-user" not in registry().runtimes:
        pytest.skip("the quickstart's demo needs the scripted and host-user plugins")


def test_every_console_block_runs_as_shown(tmp_path: Path, offline: None) -> None:
    demo = tmp_path / "demo"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "AL_CREDENTIALS_DIR": str(tmp_path / "creds"),
        "COLUMNS": "200",
    }
    for name in ("AL_PROJECT", "AL_ENV", "AL_LOG_LEVEL", "AL_LOG_FORMAT"):
        env.pop(name, None)
    cwd, ids = tmp_path, {}  # the page's run ids -> this run's
    try:
        for block in console_blocks(QUICKSTART.read_text()):
            for command, shown in block:
                for page_id, real in ids.items():
                    command = command.replace(page_id, real)
                command = command.replace("/tmp/demo", str(demo))
                if command.startswith("cd "):
                    cwd = Path(command.split()[1])
                    assert not shown
                    continue
                done = subprocess.run(
                    ["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                    text=True, timeout=120, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                assert done.returncode == 0, f"$ {command}\n{done.stdout}{done.stderr}"
                shown = [line.replace("root", getpass.getuser()) for line in shown]
                shown = [line.replace("/tmp/demo", str(demo)) for line in shown]
                printed = done.stdout.splitlines()
                assert matches(shown, printed), (
                    f"$ {command}\nthe page shows:\n" + "\n".join(shown)
                    + "\nit printed:\n" + done.stdout
                )  # fmt: skip
                for line in printed:
                    for page_id, real in zip(
                        RUN_ID.findall("\n".join(shown)), RUN_ID.findall(line), strict=False
                    ):
                        ids.setdefault(page_id, real)
                if command.startswith("al new"):  # a free port: 8080 may be taken here
                    config = demo / "config.toml"
                    config.write_text(
                        config.read_text().replace("# [gateway]\n# port = 8080",
                                                   f"[gateway]\nport = {free_port()}")
                    )  # fmt: skip
    finally:
        if demo.exists():
            subprocess.run(["bash", "-c", "al stop"], cwd=demo, env=env, capture_output=True)


def test_where_it_first_opens_the_dashboard_it_says_how_to_sign_in(tmp_path: Path) -> None:
    """Issue 42 item 9: the paragraph that first gives the dashboard's address says to sign in
    with the control token and where the scheduler keeps it (the file core writes)."""
    from llamaherd.auth import control_token

    text = QUICKSTART.read_text()
    first = text.index("http://127.0.0.1:8080/")
    section = text[text.rindex("\n\n", 0, first) : text.index("\n## ", first)]
    assert "sign in" in section and "`.al/control-token`" in section
    control_token(tmp_path / ".al")
    assert (tmp_path / ".al" / "control-token").is_file()

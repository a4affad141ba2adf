"""End-to-end fixtures: a real project on disk, `al` subprocesses, a scheduler process and a
fake model server speaking the OpenAI Chat Completions wire format on 127.0.0.1."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

CONFIG = """
[models.scripted]
provider = "scripted"
model = "scripted"

[gateway]
port = 0
"""


class E2EProject:
    """A project directory plus helpers to add agents and run `al` against it."""

    def __init__(self, root: Path, creds: Path):
        self.root = root
        self.creds = creds
        self.env = {**os.environ, "AL_CREDENTIALS_DIR": str(creds), "AL_RETRY_BASE_DELAY": "0.01"}
        root.mkdir(parents=True)
        (root / "config.toml").write_text(CONFIG)

    def add_agent(
        self, name: str, script: str | None, config: str = "", run_as: str | None = None
    ) -> Path:
        path = self.root / "agents" / name
        path.mkdir(parents=True)
        (path / "SKILL.md").write_text(f"---\nname: {name}\ndescription: e2e\n---\nWork.\n")
        runtime = f'[runtime]\ntype = "host-user"\nrun_as = "{run_as or getpass.getuser()}"\n'
        models = "" if "models" in config else 'models = ["scripted"]\n'
        (path / "config.toml").write_text(models + textwrap.dedent(config) + "\n" + runtime)
        if script is not None:
            (path / "script.toml").write_text(textwrap.dedent(script))
        return path

    def al(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "llamaherd", "--project", str(self.root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )

    def store(self) -> Any:
        from llamaherd.store import Store

        return Store.open("sqlite:///.al/work-queue.db", str(self.root))

    def wait_run(self, predicate, timeout: float = 30) -> Any:
        """Poll the store until ``predicate(runs)`` returns something truthy."""
        store = self.store()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                found = predicate(store.runs(limit=200))
                if found:
                    return found
                time.sleep(0.05)
        finally:
            store.close()
        raise AssertionError("run condition not met in time")


class Scheduler:
    """`al start` as a subprocess, ready once .al/scheduler.json names its pid."""

    def __init__(self, project: E2EProject):
        self.log_path = project.root / f"scheduler-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llamaherd",
                "--project",
                str(project.root),
                "start",
                "--grace",
                "5",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=project.env,
        )
        info = project.root / ".al" / "scheduler.json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if json.loads(info.read_text())["pid"] == self.proc.pid:
                    return
            except (OSError, ValueError, KeyError):
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"scheduler did not start:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@pytest.fixture
def project(tmp_path: Path) -> E2EProject:
    from llamaherd.plugins import registry

    needed = {"providers": ("scripted", "openai"), "runtimes": ("host-user",)}
    for kind, names in needed.items():
        missing = [name for name in names if name not in getattr(registry(), kind)]
        if missing:
            pytest.skip(f"end-to-end tests need the {', '.join(missing)} plugins")
    return E2EProject(tmp_path / "proj", tmp_path / "creds")


@pytest.fixture
def scheduler(project: E2EProject):
    started: list[Scheduler] = []

    def start() -> Scheduler:
        started.append(Scheduler(project))
        return started[-1]

    yield start
    for sched in started:
        sched.stop()


class FakeModel:
    """Chat Completions on 127.0.0.1: answers from a list of (status, body), recording requests.

    When the list is exhausted the last entry is repeated.
    """

    def __init__(self, replies: list[tuple[int, dict[str, Any]]]):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                fake.requests.append(
                    {
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                index = min(len(fake.requests), len(fake.replies)) - 1
                status, body = fake.replies[index]
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                if status == 429:
                    self.send_header("retry-after", "0")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_chat_reply(text: str = "", tool_calls: list[tuple[str, dict[str, Any]]] = ()) -> dict:
    """A Chat Completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(tool_calls)
        ]
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


@pytest.fixture
def chat_reply():
    """Builds a Chat Completions response body: ``chat_reply(text, [(tool, args), ...])``."""
    return make_chat_reply


@pytest.fixture
def fake_model():
    servers: list[FakeModel] = []

    def start(replies: list[tuple[int, dict[str, Any]]]) -> FakeModel:
        servers.append(FakeModel(replies))
        return servers[-1]

    yield start
    for server in servers:
        server.close()

"""Fixtures for tests that drive a real scheduler process over its control API."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import requests

PROJECT_CONFIG = """
[models.scripted]
provider = "scripted"
model = "scripted"

[gateway]
port = 0
"""


class Project:
    """A throwaway project on disk, with helpers to add agents and drive `al`."""

    def __init__(self, root: Path, config: str = ""):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text(PROJECT_CONFIG + textwrap.dedent(config))

    def add_agent(self, name: str, config: str = "", script: str | None = None, body: str = "Do the work.") -> Path:
        path = self.root / "agents" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "SKILL.md").write_text(f"---\nname: {name}\ndescription: test agent {name}\n---\n{body}\n")
        base = f'models = ["scripted"]\n\n[runtime]\ntype = "host-user"\nrun_as = "{getpass.getuser()}"\n'
        (path / "config.toml").write_text(textwrap.dedent(config) + "\n" + base)
        if script is not None:
            (path / "script.toml").write_text(textwrap.dedent(script))
        return path

    def al(self, *args: str, timeout: float = 120, check: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "llamaherd", "--project", str(self.root), *args],
            capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
        )
        if check and result.returncode != 0:
            raise AssertionError(f"al {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def store(self) -> Any:
        from llamaherd.store import Store

        return Store.open(f"sqlite:///{self.root}/.al/work-queue.db", str(self.root))


class SchedulerProcess:
    """`al start` as a real subprocess; `.url` and `.token` once it is up."""

    def __init__(self, project: Project, env: dict[str, str] | None = None):
        self.project = project
        self.log = open(project.root / f"scheduler-{time.monotonic_ns()}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llamaherd", "--project", str(project.root), "start", "--grace", "5"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
        info_path = project.root / ".al" / "scheduler.json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                info = json.loads(info_path.read_text())
                if info["pid"] == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"scheduler exited {self.proc.returncode}: {self.read_log()}")
            time.sleep(0.05)
        else:
            raise AssertionError(f"scheduler did not start: {self.read_log()}")
        self.url = info["url"]
        self.token = (project.root / ".al" / "control-token").read_text().strip()
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def read_log(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def post(self, path: str, body: dict[str, Any]) -> requests.Response:
        return self.http.post(self.url + path, json=body, timeout=30)

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.url + path, timeout=30)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


@pytest.fixture
def scheduler_factory():
    started: list[SchedulerProcess] = []

    def start(project: Project, env: dict[str, str] | None = None) -> SchedulerProcess:
        sched = SchedulerProcess(project, env)
        started.append(sched)
        return sched

    yield start
    for sched in started:
        sched.stop()

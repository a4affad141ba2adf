"""Flow control and budgets through real `al start` processes: signed GitHub deliveries over HTTP
on 127.0.0.1, the scripted provider reporting token counts. Each time-based control is tested
on the real clock with an otherwise idle scheduler (``test_real_clock.py``); the other modules
set a fake clock (``AL_FAKE_CLOCK_FILE``) where a test would otherwise wait long: it moves time,
never how often the scheduler wakes."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from llamaherd.testing import (
    OfflineProject,
    SchedulerProcess,
    postgres_schema,
    require_service,
    wait_until,
)

SECRET = "flow-test-secret"
START = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
GITHUB = '[webhooks.github]\ntype = "github"\n'


class Clock:
    """The fake clock every process of the test reads (``AL_FAKE_CLOCK_FILE``): standing at a
    moment (``set``, ``advance``), or running on from one in real time (``run_from``)."""

    def __init__(self, path: Path, now: float = START):
        self.path = path
        self.set(now)

    def _write(self, text: str) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.path)  # never seen half-written

    def set(self, now: float) -> None:
        self._write(repr(now))
        self.now = now

    def advance(self, seconds: float) -> None:
        self.set(self.now + seconds)

    def run_from(self, now: float) -> None:
        """The clock reads ``now`` at once and runs on in real time from there."""
        self._write(f"{now!r} {time.time()!r}")
        self.now = now


@pytest.fixture
def clock(tmp_path: Path) -> Clock:
    return Clock(tmp_path / "clock")


@pytest.fixture
def credentials(tmp_path: Path) -> Path:
    from llamaherd.api import CredentialStore

    root = tmp_path / "credentials"
    CredentialStore(root).write("github_webhook_secret", "default", {"secret": SECRET})
    return root


def flow_project(
    root: Path, clock: Clock | None, credentials: Path, settings: str = ""
) -> OfflineProject:
    """A project with a signed GitHub webhook source; on ``clock`` (None: the real clock)."""
    from llamaherd.plugins import registry

    if "scripted" not in registry().providers or "github" not in registry().webhook_sources:
        pytest.skip("flow process tests need the scripted and github plugins")
    env = {"AL_RETRY_BASE_DELAY": "0.01"}
    if clock is not None:
        env["AL_FAKE_CLOCK_FILE"] = str(clock.path)
    return OfflineProject(root, settings + GITHUB, env=env, creds=credentials, timeout=60)


def checkouts(
    tmp_path: Path,
    clock: Clock | None,
    credentials: Path,
    url: str,
    settings: str = "",
    agents: tuple[tuple[str, str, str | None], ...] | list[tuple[str, str, str | None]] = (),
    hosts: int = 2,
) -> list[OfflineProject]:
    """One checkout of a project per scheduler host, each with the database ``url`` and the
    ``agents`` ((name, config, script), ...), as several hosts sharing PostgreSQL are set up."""
    checkouts = []
    for index in range(hosts):
        name = f"host-{'abcdefgh'[index]}"
        project = flow_project(
            tmp_path / name, clock, credentials, f'database = "{url}"\n{settings}'
        )
        project.env["AL_HOST_NAME"] = name
        for agent, config, script in agents:
            project.add_scripted_agent(agent, config, script=script)
        checkouts.append(project)
    return checkouts


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh schema on the test PostgreSQL server (skipped without one: require_service)."""
    require_service("postgres")
    with postgres_schema(os.environ["AL_TEST_POSTGRES_URL"], prefix="flow_") as (_, url):
        yield url


@pytest.fixture
def project(tmp_path: Path, clock: Clock, credentials: Path) -> OfflineProject:
    return flow_project(tmp_path / "project", clock, credentials)


@pytest.fixture
def start(scheduler: Callable[..., SchedulerProcess]) -> Callable[..., SchedulerProcess]:
    """Start `al start` for a project; return once it listens."""

    def run(project: OfflineProject, **env: str) -> SchedulerProcess:
        process = scheduler(project, env)
        wait_until(lambda: "listening on" in process.read_log(), what="the scheduler listening")
        return process

    return run


def deliver(url: str, payload: dict[str, Any], event: str = "push") -> requests.Response:
    """One signed GitHub delivery to ``url``'s ``/webhooks/github``."""
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256="
        + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
    }
    response = requests.post(f"{url}/webhooks/github", data=body, headers=headers, timeout=30)
    assert response.status_code == 202, response.text
    return response


def push(repo: str, seq: int) -> dict[str, Any]:
    return {"ref": "refs/heads/main", "repository": {"full_name": repo}, "seq": seq}


def pull_request(number: int, seq: int = 0, action: str = "synchronize") -> dict[str, Any]:
    return {
        "action": action,
        "number": number,
        "seq": seq,
        "pull_request": {"number": number, "base": {"ref": "main"}, "user": {"login": "a"}},
        "repository": {"full_name": "acme/widgets"},
    }


@pytest.fixture
def runs_of() -> Iterator[Callable[..., list[Any]]]:
    """``runs_of(project, agent=None)``: the project's runs, newest first."""
    stores: dict[Path, Any] = {}

    def read(project: OfflineProject, agent: str | None = None) -> list[Any]:
        store = stores.get(project.root)
        if store is None:
            store = stores[project.root] = project.store()
        return store.runs(agent=agent, limit=1000)

    yield read
    for store in stores.values():
        store.close()


def agent_events(project: OfflineProject, agent: str, kind: str) -> list[dict[str, Any]]:
    store = project.store()
    try:
        return [e for e in store.agent_events(agent, limit=1000) if e["type"] == kind]
    finally:
        store.close()


@pytest.fixture
def kit() -> Any:
    """The helpers above, for test modules (which import nothing local): ``kit.deliver``,
    ``kit.push``, ``kit.pull_request``, ``kit.agent_events``, ``kit.flow_project``,
    ``kit.checkouts``."""

    class Kit:
        pass

    for helper in (deliver, push, pull_request, agent_events, flow_project, checkouts):
        setattr(Kit, helper.__name__, staticmethod(helper))
    return Kit

"""Fixtures for agent tests and replay (``al test``, ``al record``, ``al replay``): an offline
project whose agents run in real host-user sandboxes, fake model servers speaking the OpenAI
Chat Completions wire format on 127.0.0.1, a real scheduler and signed GitHub deliveries."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from llamaherd.testing import ModelServer, OfflineProject, wait_until

SECRET = "agent-tests-webhook-secret"
FINAL = ("done", "error", "timeout", "killed")


@pytest.fixture
def credentials(tmp_path: Path) -> Path:
    from llamaherd.api import CredentialStore

    root = tmp_path / "credentials"
    CredentialStore(root).write("github_webhook_secret", "default", {"secret": SECRET})
    return root


@pytest.fixture
def project(tmp_path: Path, credentials: Path) -> OfflineProject:
    from llamaherd.plugins import registry

    needed = {"providers": ("scripted", "openai"), "runtimes": ("host-user",)}
    for kind, names in needed.items():
        missing = [n for n in names if n not in getattr(registry(), kind)]
        if missing:
            pytest.skip(f"agent tests need the {', '.join(missing)} plugins")
    return OfflineProject(
        tmp_path / "project",
        '[webhooks.github]\ntype = "github"\n',
        env={"AL_RETRY_BASE_DELAY": "0.01"},
        creds=credentials,
        timeout=120,
    )


@pytest.fixture
def fake_model() -> Iterator[Callable[..., ModelServer]]:
    """``fake_model(*bodies)``: a model server answering those Chat Completions bodies in turn
    (``.stop()`` takes it down: nothing listens there any more)."""
    servers: list[ModelServer] = []

    def start(*bodies: dict[str, Any]) -> ModelServer:
        server = ModelServer()
        for body in bodies:
            server.reply(200, body)
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()

        def stop() -> None:
            server.shutdown()
            server.server_close()

        server.stop = stop  # type: ignore[attr-defined]
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def add_model(project: OfflineProject, name: str, server: ModelServer) -> None:
    """A ``[models.<name>]`` of the openai provider at ``server``."""
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            f'\n[models.{name}]\nprovider = "openai"\nmodel = "{name}-model"\nbase_url = "{server.url}/v1"\n'
        )


def deliver(url: str, payload: dict[str, Any], event: str = "pull_request") -> requests.Response:
    """A delivery to ``url``'s ``/webhooks/github``, signed as GitHub signs (by the source's own
    ``request_headers``)."""
    from llamaherd.plugins import registry

    body = json.dumps(payload).encode()
    source = registry().webhook_sources["github"]
    headers = source.request_headers(body, event, str(uuid.uuid4()), SECRET)
    return requests.post(f"{url}/webhooks/github", data=body, headers=headers, timeout=10)


PR_OPENED = {
    "action": "opened",
    "number": 7,
    "pull_request": {
        "number": 7,
        "title": "Fix the flaky test",
        "base": {"ref": "main"},
        "user": {"login": "alice"},
    },
    "repository": {"full_name": "acme/widgets"},
    "sender": {"login": "alice"},
}


def finished_runs(project: OfflineProject, agent: str) -> list[Any]:
    store = project.store()
    try:
        return [r for r in store.runs(agent=agent, limit=100) if r.state in FINAL]
    finally:
        store.close()


def run_once(
    project: OfflineProject,
    scheduler: Callable[..., Any],
    agent: str,
    payload: dict[str, Any] | None = None,
) -> Any:
    """Start the scheduler, deliver ``payload`` (a pull request) or run ``agent`` by hand, wait
    for its run to end and stop the scheduler; the run."""
    process = scheduler(project)
    wait_until(lambda: "listening on" in process.read_log(), what="the scheduler's server")
    if payload is None:
        assert process.post("/control/run", {"agent": agent}).status_code == 202
    else:
        answer = deliver(process.url, payload)
        assert answer.status_code == 202 and answer.json()["agents"] == [agent], answer.text
    [run] = wait_until(lambda: finished_runs(project, agent), 60, what=f"a run of {agent} ended")
    process.stop()
    return run

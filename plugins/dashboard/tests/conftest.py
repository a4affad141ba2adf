"""Fixtures: a real scheduler process serving the dashboard, on a local or a non-local address.

Agents use the offline ``scripted`` model and the host-user runtime as the current user, so the
runs are real (sandbox, gateway, store) and need no network.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llamaherd_dashboard.password import write_verifier

from llamaherd.testing import OfflineProject, SchedulerProcess, wait_until

SECRET = "dash-secret-token-value-7f3a91"
PASSWORD = "correct horse battery staple"
# A generic source taking unsigned deliveries, for the deliveries page and Replay.
PROJECT_TABLES = """
[webhooks.hooks]
type = "generic"
allowUnsigned = true
"""

# Six log lines half a second apart: long enough to watch arrive, short enough for the suite.
SLOW_SCRIPT = """
[[turns]]
repeat = 6
tool_calls = [{ name = "bash", arguments = { command = "echo line {{ turn }}; sleep 0.5" } }]

[[turns]]
tool_calls = [{ name = "set_status", arguments = { text = "<b>half</b> way" } }]

[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = { lines = 6 } } }]

[[turns]]
text = "All lines written."
"""

FOREVER_SCRIPT = """
[[turns]]
loop = true
tool_calls = [{ name = "bash", arguments = { command = "sleep 1" } }]
"""

SECRET_SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "cat $AL_CREDENTIALS_PATH/github_token/bot/token" } }]

[[turns]]
text = "Read it."
"""


def make_project(root: Path, bind: str | None = None) -> OfflineProject:
    """Agents ``slow`` (six lines, then a return value; on a schedule and on ``push``
    deliveries to the ``hooks`` source), ``forever`` (until killed) and ``secret`` (every 6 h,
    prints its credential, which the runner redacts)."""
    project = OfflineProject(root)
    config = (project.root / "config.toml").read_text()
    if bind:
        config = config.replace("port = 0", f'port = 0\nbind = "{bind}"')
    project.config(config + PROJECT_TABLES)
    slow = 'schedule = "0 3 * * *"\n\n[[webhooks]]\nsource = "hooks"\nevents = ["push"]\n'
    project.add_scripted_agent("slow", slow, SLOW_SCRIPT)
    project.add_scripted_agent("forever", "timeout = 120", FOREVER_SCRIPT)
    secret = 'credentials = ["github_token:bot"]\nevery = "6h"\nscale = 4'
    project.add_scripted_agent("secret", secret, SECRET_SCRIPT)
    project.write("credentials/github_token/bot/token", SECRET)
    write_verifier(project.root / ".al", PASSWORD)  # as `al dashboard password` does
    return project


def wait_for(probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``probe`` every 0.1 s until it returns something truthy (bounded)."""
    return wait_until(probe, timeout, interval=0.1, what=f"{probe}")


class Dashboard:
    """A scheduler process serving the dashboard, with helpers to drive and watch it."""

    def __init__(self, project: OfflineProject):
        self.sched = SchedulerProcess(
            project, env={"AL_CREDENTIALS_DIR": str(project.root / "credentials")}
        )
        self.url: str = self.sched.url
        self.token: str = self.sched.token
        self.bearer = {"Authorization": f"Bearer {self.token}"}

    def get(self, path: str) -> Any:
        """A GET with the control token (allowed from anywhere)."""
        return httpx.get(self.url + path, headers=self.bearer, timeout=10)

    def queue_run(self, agent: str) -> str:
        """Queue a manual run with the control token; its run id once it has been claimed."""
        response = httpx.post(f"{self.url}/api/agents/{agent}/run", headers=self.bearer, timeout=10)
        assert response.status_code == 202, response.text
        item = response.json()["queued"]
        return wait_for(
            lambda: next((r["id"] for r in self.runs(agent) if r["item_id"] == item), None)
        )

    def runs(self, agent: str) -> list[dict[str, Any]]:
        return self.get(f"/api/agents/{agent}").json()["runs"]

    def state(self, run_id: str) -> str:
        return self.get(f"/api/runs/{run_id}").json()["run"]["state"]

    def queue_many(self, agent: str, count: int) -> None:
        """Queue ``count`` manual runs through the control API."""
        body = {"agent": agent, "count": count}
        response = httpx.post(f"{self.url}/control/run", json=body, headers=self.bearer, timeout=10)
        assert response.status_code == 202, response.text

    def kill(self, run_id: str) -> None:
        response = httpx.post(f"{self.url}/api/runs/{run_id}/kill", headers=self.bearer, timeout=10)
        assert response.status_code == 200, response.text

    def deliver(self, event: str, body: dict[str, Any], raw: bytes | None = None) -> Any:
        """An (unsigned) delivery to the ``hooks`` source: ``body`` as JSON, or ``raw`` bytes."""
        headers = {"X-Event": event, "X-Delivery-Id": f"d-{time.time_ns()}"}
        content = raw if raw is not None else json.dumps(body).encode()
        url = f"{self.url}/webhooks/hooks"
        return httpx.post(url, content=content, headers=headers, timeout=10)

    def stop(self) -> None:
        self.sched.stop()

    # Test modules reach these through the fixtures: conftest cannot be imported under
    # pytest's --import-mode=importlib.
    wait_for = staticmethod(wait_for)
    secret = SECRET
    password = PASSWORD


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A scheduler on 127.0.0.1: requests from the tests are local."""
    dash = Dashboard(make_project(tmp_path_factory.mktemp("local") / "proj"))
    yield dash
    dash.stop()


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A scheduler on 127.0.0.2: still loopback, but not 127.0.0.1, so requests are non-local."""
    dash = Dashboard(make_project(tmp_path_factory.mktemp("remote") / "proj", bind="127.0.0.2"))
    assert dash.url.startswith("http://127.0.0.2:")
    yield dash
    dash.stop()

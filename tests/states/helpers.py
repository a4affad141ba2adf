"""Helpers of the agent-state transition and talking tests (real `al start` processes)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import requests

from llamaherd.testing import OfflineProject, wait_until

HOOKS = '\n[webhooks.hooks]\ntype = "generic"\nallowUnsigned = true\n'


def project_with_hooks(root: Any) -> OfflineProject:
    """An offline project with an unsigned generic webhook source named ``hooks``."""
    project = OfflineProject(root)
    with (project.root / "config.toml").open("a") as fh:
        fh.write(HOOKS)
    return project


def openai_model(project: OfflineProject, url: str, name: str = "fake") -> None:
    """A ``[models.<name>]`` table: the openai provider against a local server."""
    with (project.root / "config.toml").open("a") as fh:
        fh.write(f'\n[models.{name}]\nprovider = "openai"\nmodel = "m"\nbase_url = "{url}/v1"\n')


def post_webhook(url: str, body: dict[str, Any]) -> requests.Response:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-Delivery-Id": uuid.uuid4().hex}
    return requests.post(f"{url}/webhooks/hooks", data=data, headers=headers, timeout=10)


def runs_of(store: Any, agent: str, state: str | None = None) -> list[Any]:
    """The agent's runs, newest first (only those in ``state`` when given)."""
    runs = store.runs(agent=agent, limit=1000)
    return [r for r in runs if state is None or r.state == state]


def one_run(store: Any, agent: str, state: str, timeout: float = 30) -> Any:
    """The agent's newest run once one is in ``state``."""
    return wait_until(lambda: runs_of(store, agent, state), timeout, what=f"{agent} {state}")[0]


def events(store: Any, run_id: str, type: str) -> list[dict[str, Any]]:
    """The run's event data of one ``type``, oldest first."""
    return [e["data"] for e in store.events(run_id) if e["type"] == type]


def tool_results(run: Any) -> list[str]:
    """The contents of the tool messages of a run's transcript, in order."""
    return [m["content"] for m in run.transcript or [] if m.get("role") == "tool"]


def dashboard_browser(url: str, token: str) -> requests.Session:
    """A browser signed in to the dashboard (with the control token, as everyone must)."""
    import re

    browser = requests.Session()
    login = browser.get(f"{url}/login", timeout=10).text
    csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', login).group(1)
    signed = browser.post(
        f"{url}/login", data={"csrf": csrf, "token": token}, allow_redirects=False, timeout=10
    )
    assert signed.status_code == 303, signed.text
    return browser

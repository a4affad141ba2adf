"""A scheduler listens before it loads its agents (``llamaherd.loading``): ``/health`` answers
and webhook deliveries are taken into the durable store while the agents are read and
validated; those deliveries run once the agents are ready, across a crash too.

The agents' loading is held open by a plugin whose trigger type validates one agent only once
the project has a ``RELEASE`` file (as a slow check would: the docker runtime's asks the daemon),
so what happens while loading is seen every time, not by a race with the clock.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from llamaherd.testing import OfflineProject, wait_until

SECRET = "listen-first-secret"
PLUGIN = textwrap.dedent(
    """
    import time

    from llamaherd import hookimpl


    class Held:
        name = "held"
        description = "Validates an agent only once the project has a RELEASE file."
        schema = {"held": {"type": "boolean"}}

        def start(self, ctx):
            pass

        def stop(self):
            pass

        def validate(self, agent):
            while not (agent.project.root / "RELEASE").exists():
                time.sleep(0.05)
            return []


    @hookimpl
    def register_trigger_types(register):
        register(Held())
    """
)
WORKER = '[[webhooks]]\nsource = "github"\nevents = ["push"]\n'


@pytest.fixture
def held_project(tmp_path: Path) -> OfflineProject:
    from llamaherd.api import CredentialStore
    from llamaherd.plugins import registry

    if "scripted" not in registry().providers or "github" not in registry().webhook_sources:
        pytest.skip("needs the scripted and github plugins")
    credentials = tmp_path / "credentials"
    CredentialStore(credentials).write("github_webhook_secret", "default", {"secret": SECRET})
    (tmp_path / "held_plugin.py").write_text(PLUGIN)
    project = OfflineProject(
        tmp_path / "project", '[webhooks.github]\ntype = "github"\n', creds=credentials
    )
    project.env["PYTHONPATH"] = str(tmp_path)
    project.env["AL_PLUGINS"] = ",".join(
        filter(None, [project.env.get("AL_PLUGINS"), "held_plugin"])
    )
    return project


def deliver(url: str, delivery: str) -> requests.Response:
    """One signed GitHub push to ``url``."""
    body = json.dumps({"ref": "refs/heads/main", "repository": {"full_name": "a/b"}}).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery,
               "X-Hub-Signature-256": signature, "Content-Type": "application/json"}  # fmt: skip
    return requests.post(f"{url}/webhooks/github", data=body, headers=headers, timeout=30)


def runs(project: OfflineProject) -> list[Any]:
    store = project.store()
    try:
        return store.runs(limit=10)
    finally:
        store.close()


def loading_of(url: str) -> dict[str, Any] | None:
    answer = requests.get(f"{url}/health", timeout=30)
    assert answer.status_code == 200
    return answer.json().get("loading")


def test_health_and_deliveries_before_the_last_of_2000_agents_is_loaded(held_project, scheduler):
    project = held_project
    pool = ThreadPoolExecutor(1)
    project.add_scripted_agent("agent-0000", WORKER)
    for i in range(1, 1999):
        project.add_scripted_agent(f"agent-{i:04d}")
    project.add_scripted_agent("agent-1999", "held = true\n")  # the last one read
    process = scheduler(project, ready=False)
    try:
        loading = wait_until(lambda: loading_of(process.url), what="/health while loading")
        assert loading["phase"] in ("starting", "loading", "validating")
        # Validation waits on the last agent: every other one is read, not all registered.
        wait_until(lambda: (loading_of(process.url) or {}).get("done") == 1999)
        assert loading_of(process.url) == {
            "phase": "validating", "done": 1999, "total": 2000,
            "text": "validating 1,999 of 2,000 agents",
        }  # fmt: skip
        taken = deliver(process.url, "during-loading")
        assert taken.status_code == 202 and taken.json() == {
            "delivery": "during-loading",
            "pending": True,
        }
        assert deliver(process.url, "during-loading").json()["duplicate"] is True
        stat = project.al("stat", check=True).stdout
        assert "validating 1,999 of 2,000 agents" in stat
        assert runs(project) == []  # nothing runs before its agent is ready
        # A request that needs the agents waits for them: answered once they are ready.
        by_hand = pool.submit(process.post, "/control/run", {"agent": "agent-0001"})
    finally:
        (project.root / "RELEASE").touch()
    assert by_hand.result(120).status_code == 202
    assert wait_until(lambda: loading_of(process.url) is None, 120, what="the agents loaded")
    done = project.wait_run(lambda runs: len([r for r in runs if r.state == "done"]) == 2, 60)
    assert done and sorted(r.agent for r in runs(project)) == ["agent-0000", "agent-0001"]


def test_a_delivery_taken_while_loading_runs_after_a_crash(held_project, scheduler):
    """Acknowledged before it was routed, a delivery is kept in the store as such: the next
    scheduler routes it once its agents are ready."""
    project = held_project
    project.add_scripted_agent("worker", WORKER)
    project.add_scripted_agent("late", "held = true\n")
    first = scheduler(project, ready=False)
    wait_until(lambda: (loading_of(first.url) or {}).get("phase") == "validating")
    assert deliver(first.url, str(uuid.uuid4())).status_code == 202
    first.kill9()
    assert runs(project) == []
    (project.root / "RELEASE").touch()
    scheduler(project)
    [run] = project.wait_run(lambda runs: [r for r in runs if r.state == "done"] or None, 60)
    assert run.agent == "worker"

"""Action Llama's control routes answer scripts written against it (issue 33, item 9), on a
real scheduler: the same paths, status codes and body shapes, and its ``gateway_api_key``
credential accepted as the bearer."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from llamaherd.testing import OfflineProject, wait_until

API_KEY = "peer-gateway-key-0123456789"
HOLD = """
[[turns]]
tool_calls = [{ name = "acquire_lock", arguments = { resource_key = "lock://repo/main" } }]
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "sleep 60", timeout = 120 } }]
[[turns]]
text = "done"
"""


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    from llamaherd.credentials import CredentialStore

    CredentialStore(tmp_path / "creds").write("gateway_api_key", "default", {"key": API_KEY})
    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=60)
    project.add_scripted_agent("worker", "scale = 2\n")
    project.add_scripted_agent("holder", "", HOLD)
    return project


def call(sched, method: str, path: str, key: str | None = API_KEY, **kw):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.request(method, sched.url + path, headers=headers, timeout=30, **kw)


def test_the_gateway_api_key_is_a_bearer_and_nothing_else_is(project, scheduler):
    sched = scheduler(project)
    for path in ("/locks/status", "/api/stats/triggers", "/control/stat"):
        assert call(sched, "GET", path).status_code == 200, path
        assert call(sched, "GET", path, key=None).status_code == 401, path
        assert call(sched, "GET", path, key=API_KEY + "x").status_code == 401, path
    assert call(sched, "POST", "/control/trigger/worker", key="wrong").status_code == 401


def test_trigger_pause_resume_kill_as_the_peer_answers(project, scheduler):
    sched = scheduler(project)
    started = call(sched, "POST", "/control/trigger/worker", json={"prompt": "triage #12"})
    assert started.status_code == 200
    body = started.json()
    assert body["success"] is True and body["message"] == "Agent worker triggered"
    run = project.wait_run(
        lambda runs: [r for r in runs if r.id == body["instanceId"] and r.state == "done"]
    )[0]
    assert "triage #12" in next(m["content"] for m in run.transcript if m["role"] == "user")

    missing = call(sched, "POST", "/control/trigger/nope")
    assert (missing.status_code, missing.json()) == (404, {"error": 'Agent "nope" not found'})

    paused = call(sched, "POST", "/control/agents/worker/pause")
    assert paused.json() == {"success": True, "message": "Agent worker paused"}
    held = call(sched, "POST", "/control/trigger/worker")  # queued behind the pause
    assert held.status_code == 200 and held.json()["instanceId"] is None
    resumed = call(sched, "POST", "/control/agents/worker/resume")
    assert resumed.json() == {"success": True, "message": "Agent worker resumed"}
    for verb in ("pause", "resume", "kill"):
        response = call(sched, "POST", f"/control/agents/nope/{verb}")
        assert (response.status_code, response.json()) == (404, {"error": "Agent nope not found"})

    assert sched.post("/control/pause", {}).status_code == 200  # the whole scheduler
    refused = call(sched, "POST", "/control/trigger/worker")
    assert (refused.status_code, refused.json()) == (409, {"error": "Scheduler is paused"})
    sched.post("/control/resume", {})

    call(sched, "POST", "/control/trigger/holder")
    wait_until(lambda: call(sched, "GET", "/locks/status").json()["locks"], what="the lock")
    (lock,) = call(sched, "GET", "/locks/status").json()["locks"]
    holder = project.wait_run(lambda runs: [r for r in runs if r.agent == "holder"])[0]
    assert lock == {
        "resourceKey": "lock://repo/main",
        "agentName": "holder",
        "holder": holder.id,
        "heldSince": lock["heldSince"],
    }
    assert abs(lock["heldSince"] / 1000 - time.time()) < 60
    killed = call(sched, "POST", "/control/agents/holder/kill")
    assert killed.json() == {
        "success": True,
        "message": "Killed 1 instance(s) of holder",
        "killed": 1,
    }
    wait_until(lambda: call(sched, "GET", "/locks/status").json() == {"locks": []})


def test_trigger_history_rows(project, scheduler):
    sched = scheduler(project)
    for _ in range(3):
        assert call(sched, "POST", "/control/trigger/worker").status_code == 200
    project.wait_run(lambda runs: len([r for r in runs if r.state == "done"]) == 3)
    page = call(sched, "GET", "/api/stats/triggers?limit=2").json()
    assert (page["total"], page["limit"], page["offset"], len(page["triggers"])) == (3, 2, 0, 2)
    row = page["triggers"][0]
    assert set(row) == {
        "ts", "instanceId", "agentName", "triggerType", "triggerSource", "result",
        "webhookReceiptId", "deadLetterReason",
    }  # fmt: skip
    assert (row["agentName"], row["triggerType"], row["result"]) == (
        "worker",
        "manual",
        "completed",
    )
    assert isinstance(row["ts"], int) and abs(row["ts"] / 1000 - time.time()) < 120
    rest = call(sched, "GET", "/api/stats/triggers?limit=2&offset=2").json()
    assert len(rest["triggers"]) == 1
    assert call(sched, "GET", "/api/stats/triggers?limit=500").json()["limit"] == 100
    assert call(sched, "GET", "/api/stats/triggers?agent=holder").json()["total"] == 0
    assert call(sched, "GET", "/api/stats/triggers?triggerType=schedule").json()["total"] == 0
    assert call(sched, "GET", "/api/stats/triggers?triggerType=manual").json()["total"] == 3

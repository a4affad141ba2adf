"""``/control/*``: every call, reads included, needs the control token as a Bearer header, and a
``Host`` that names this server (issue 18, items 4 and 9).

A real Engine serves the real app on 127.0.0.1; the requests are what another local process (an
agent's sandbox user), a DNS-rebinding page or a cross-site form would send.
"""

from __future__ import annotations

import pytest
import requests

from llamaherd.client import ControlClient

CONFIG = """
[gateway]
url = "https://herd.example.org"
"""

READS = [
    "/control/health",
    "/control/stat",
    "/control/runs",
    "/control/runs/{run}",
    "/control/runs/{run}/events",
    "/control/stats",
    "/control/agents/worker/state",
]


@pytest.fixture
def herd(webhook_server):
    server = webhook_server(CONFIG, agents={"worker": ""})
    server.token = server.engine.app.state.control_token
    response = server.http.post(
        f"{server.url}/control/run",
        json={"agent": "worker", "payload": {"secret_plan": "x"}},
        headers={"Authorization": f"Bearer {server.token}"},
    )
    assert response.status_code == 202, response.text
    server.run_id = server.next_run().id
    return server


def paths(herd):
    return [path.format(run=herd.run_id) for path in READS]


def test_reads_without_the_token_are_refused(herd):
    for path in paths(herd):
        response = requests.get(herd.url + path, timeout=10)
        assert response.status_code == 401, (path, response.text)
        assert "secret_plan" not in response.text
        assert "control token required" in response.json()["error"]


def test_reads_with_the_bearer_token_are_answered(herd):
    bearer = {"Authorization": f"Bearer {herd.token}"}
    for path in paths(herd):
        response = requests.get(herd.url + path, headers=bearer, timeout=10)
        assert response.status_code == 200, (path, response.text)
    # The CLI's client (also what the deploy and MCP plugins use) sends the token.
    with ControlClient(herd.url, herd.token) as client:
        assert [r["id"] for r in client.get("/control/runs")["runs"]] == [herd.run_id]


def test_a_wrong_token_is_refused(herd):
    response = requests.get(
        herd.url + "/control/stat", headers={"Authorization": "Bearer nope"}, timeout=10
    )
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("host", "status"),
    [
        # DNS rebinding: a page on evil.example resolved to 127.0.0.1 sends its own name.
        ("evil.example", 421),
        ("evil.example:8080", 421),
        ("127.0.0.2", 421),
        ("", 421),
        # Loopback names, and the host of [gateway] url, are this server.
        ("localhost", 200),
        ("127.0.0.1:9", 200),
        ("[::1]:80", 200),
        ("herd.example.org", 200),
    ],
)
def test_only_this_servers_names_are_answered_even_with_the_token(herd, host, status):
    response = requests.get(
        herd.url + "/control/stat",
        headers={"Authorization": f"Bearer {herd.token}", "Host": host},
        timeout=10,
    )
    assert response.status_code == status, response.text
    if status == 421:
        assert "not this server's name" in response.json()["error"]


def test_the_dashboard_cookie_does_not_act_on_control_routes(herd):
    """A cross-site ``text/plain`` form post carries the browser's cookies, never a header."""
    before = herd.depth()
    response = requests.post(
        herd.url + "/control/run",
        data='{"agent": "worker"}',
        headers={
            "Content-Type": "text/plain",
            "Cookie": f"al_token={herd.token}",
            "Origin": "https://evil.example",
        },
        timeout=10,
    )
    assert response.status_code == 401, response.text
    assert herd.depth() == before
    read = requests.get(
        herd.url + "/control/runs", headers={"Cookie": f"al_token={herd.token}"}, timeout=10
    )
    assert read.status_code == 401


def test_the_peer_liveness_probe_stays_open(herd):
    assert requests.get(herd.url + "/health", timeout=10).json() == {"status": "ok"}

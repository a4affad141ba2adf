"""The dashboard over real HTTP against a real scheduler: pages, JSON API, stream, auth, CSRF."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

MUTATIONS = ["/api/agents/slow/run", "/api/runs/{run}/kill", "/logout"]


def browser(dash: Any, **kwargs: Any) -> httpx.Client:
    """A cookie-keeping client with no control token, like a browser. For the scheduler on
    127.0.0.2 it connects from 127.0.0.2 too (else the kernel picks 127.0.0.1 as the source)."""
    source = "127.0.0.2" if dash.url.startswith("http://127.0.0.2:") else None
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=dash.url, timeout=10, transport=transport, **kwargs)


def page_csrf(client: httpx.Client, path: str = "/") -> str:
    """The CSRF token of the page at ``path``, bound to this client's session cookie."""
    response = client.get(path)
    assert response.status_code == 200, response.text
    return csrf_of(response.text)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf-token" content="([0-9a-f]+)"', html)
    assert match, "page carries no CSRF token"
    return match.group(1)


# ---------------------------------------------------------------------- local reads
def test_pages_and_api_show_a_finished_run(local: Any) -> None:
    run_id = local.queue_run("slow")
    local.wait_for(lambda: local.state(run_id) == "done")
    with browser(local) as client:
        agents = client.get("/api/agents").json()["agents"]
        row = next(r for r in agents if r["agent"] == "slow")
        assert row["last_result"] == "done" and row["next_fire"] is not None
        detail = client.get(f"/api/runs/{run_id}").json()
        assert detail["run"]["return_value"] == {"lines": 6}
        assert [s["to"] for s in detail["states"]] == ["running", "done"]
        assert [m["text"] for m in detail["status_messages"]] == ["<b>half</b> way"]
        assert "transcript" not in detail["run"] and "token_hash" not in detail["run"]
        outputs = [e["output"] for e in client.get(f"/api/runs/{run_id}/events").json()["events"]]
        assert [o for o in outputs if o.startswith("line")] == [f"line {n}" for n in range(1, 7)]

        html = client.get(f"/runs/{run_id}").text
        assert (
            "&lt;b&gt;half&lt;/b&gt; way" in html and "<b>half</b>" not in html
        )  # agent text is escaped
        assert "line 6" in html and "data-stream" not in html  # a final run needs no stream
        agent_html = client.get("/agents/slow").text
        assert run_id in agent_html and "0 3 * * *" in agent_html
        headers = client.get("/").headers
        assert headers["x-frame-options"] == "DENY"  # Run and Kill cannot be clickjacked
        assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_stream_sends_existing_events_then_ends(local: Any) -> None:
    run_id = local.queue_run("slow")
    local.wait_for(lambda: local.state(run_id) == "done")
    with browser(local) as client, client.stream("GET", f"/api/runs/{run_id}/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        body = "".join(response.iter_text())
    blocks = [b for b in body.split("\n\n") if b.strip()]
    assert blocks[-1] == 'event: end\ndata: {"state": "done"}'
    events = [json.loads(b.split("data: ", 1)[1]) for b in blocks[:-1]]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert events[0]["type"] == "state" and events[-1]["data"]["to"] == "done"
    after = events[-3]["id"]
    with browser(local) as client:
        tail = client.get(f"/api/runs/{run_id}/stream", params={"after": after}).text
        # A reconnecting EventSource repeats the URL; Last-Event-ID says where it was.
        resumed = client.get(
            f"/api/runs/{run_id}/stream", params={"after": 0}, headers={"Last-Event-ID": str(after)}
        ).text
    assert tail == resumed
    assert [line for line in tail.splitlines() if line.startswith("id: ")] == [
        f"id: {e['id']}" for e in events[-2:]
    ]


def test_credentials_are_shown_by_name_and_redacted_from_logs(local: Any) -> None:
    run_id = local.queue_run("secret")
    local.wait_for(lambda: local.state(run_id) == "done")
    with browser(local) as client:
        agent = client.get("/api/agents/secret").json()
        assert agent["credentials"] == [{"name": "github_token:bot", "present": True}]
        for path in (
            "/agents/secret",
            f"/runs/{run_id}",
            f"/api/runs/{run_id}/events",
            f"/api/runs/{run_id}/stream",
            f"/api/runs/{run_id}",
            "/api/agents/secret",
        ):
            assert local.secret not in client.get(path).text, path
        outputs = [e["output"] for e in client.get(f"/api/runs/{run_id}/events").json()["events"]]
        assert "***" in outputs


def test_unknown_agent_and_run_are_404(local: Any) -> None:
    with browser(local) as client:
        for path in (
            "/agents/nope",
            "/runs/nope-123",
            "/api/agents/nope",
            "/api/runs/nope-123",
            "/api/runs/nope-123/events",
            "/api/runs/nope-123/stream",
        ):
            assert client.get(path).status_code == 404, path


# ---------------------------------------------------------------------- local writes need CSRF
def test_local_post_needs_the_csrf_token_of_its_session(local: Any) -> None:
    with browser(local) as client, browser(local) as other:
        csrf = page_csrf(client)
        foreign = page_csrf(other)
        url = "/api/agents/slow/run"
        assert client.post(url).status_code == 403
        assert client.post(url, data={"csrf": "0" * 64}).status_code == 403
        assert client.post(url, data={"csrf": foreign}).status_code == 403  # another session's
        cross = client.post(url, data={"csrf": csrf}, headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403 and "cross-origin" in cross.text
        ok = client.post(url, data={"csrf": csrf})
        assert ok.status_code == 303 and ok.headers["location"].startswith("/agents/slow?queued=")
        assert client.post(url, headers={"X-CSRF-Token": csrf}).status_code == 202
        with browser(local) as fresh:  # no session cookie at all
            assert fresh.post(url, data={"csrf": csrf}).status_code == 403


def test_dns_rebinding_host_is_not_local(local: Any) -> None:
    with browser(local, headers={"Host": "evil.example"}) as client:
        response = client.get("/")
        assert response.status_code == 303 and response.headers["location"] == "/login?next=%2F"
        assert client.get("/api/agents").status_code == 401


def test_kill_from_the_api(local: Any) -> None:
    run_id = local.queue_run("forever")
    with browser(local) as client:
        csrf = page_csrf(client, f"/runs/{run_id}")
        response = client.post(f"/api/runs/{run_id}/kill", headers={"X-CSRF-Token": csrf})
        assert response.json() == {"run": run_id, "killed": True}
    local.wait_for(lambda: local.state(run_id) == "killed")


# ---------------------------------------------------------------------- non-local
@pytest.mark.parametrize("path", MUTATIONS)
def test_non_local_mutations_without_the_token_are_refused(remote: Any, path: str) -> None:
    with browser(remote) as client:
        csrf = page_csrf(client, "/login")  # a valid session and CSRF token, but no control token
        target = path.format(run="forever-0000")
        assert client.post(target).status_code == 401
        assert client.post(target, data={"csrf": csrf}).status_code == 401
        assert client.post(target, headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_non_local_reads_need_the_token(remote: Any) -> None:
    with browser(remote) as client:
        for path in ("/", "/agents/slow", "/runs/x"):
            response = client.get(path)
            assert response.status_code == 303 and response.headers["location"].startswith(
                "/login?next="
            )
        for path in (
            "/api/agents",
            "/api/agents/slow",
            "/api/runs/x",
            "/api/runs/x/events",
            "/api/runs/x/stream",
        ):
            assert client.get(path).status_code == 401, path
        assert (
            client.get("/static/dashboard/dashboard.css").status_code == 200
        )  # the login page's style
    assert remote.get("/api/agents").status_code == 200


def test_non_local_client_is_not_local_whatever_host_it_names(remote: Any) -> None:
    port = remote.url.rsplit(":", 1)[1]
    with browser(remote, headers={"Host": f"127.0.0.1:{port}"}) as client:
        assert client.get("/api/agents").status_code == 401
        assert client.get("/").headers["location"] == "/login?next=%2F"


def test_non_local_bearer_token_needs_no_csrf(remote: Any) -> None:
    response = httpx.post(f"{remote.url}/api/agents/slow/run", headers=remote.bearer, timeout=10)
    assert response.status_code == 202


def test_login_sets_a_strict_http_only_cookie_and_writes_need_csrf(remote: Any) -> None:
    with browser(remote) as client:
        csrf = page_csrf(client, "/login")
        assert client.post("/login", data={"csrf": csrf, "token": "wrong"}).status_code == 401
        assert client.post("/login", data={"token": remote.token}).status_code == 403  # no CSRF
        response = client.post(
            "/login?next=%2F%2Fevil.example", data={"csrf": csrf, "token": remote.token}
        )
        assert (
            response.status_code == 303 and response.headers["location"] == "/"
        )  # no open redirect
        cookie = response.headers["set-cookie"]
        assert (
            cookie.startswith("al_token=") and "HttpOnly" in cookie and "SameSite=strict" in cookie
        )
        assert client.get("/").status_code == 200
        assert client.post("/api/agents/slow/run").status_code == 403  # token cookie, no CSRF
        assert client.post("/api/agents/slow/run", data={"csrf": csrf}).status_code == 303
        assert client.post("/logout", data={"csrf": csrf}).headers["location"] == "/login"
        client.cookies.delete("al_token")
        assert client.get("/").status_code == 303

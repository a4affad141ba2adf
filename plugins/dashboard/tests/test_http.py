"""The dashboard over real HTTP against a real scheduler: pages, JSON API, stream, auth, CSRF."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

MUTATIONS = ["/api/agents/slow/run", "/api/runs/{run}/kill", "/logout"]


@contextmanager
def browser(dash: Any, signed_in: bool = True, **kwargs: Any) -> Iterator[httpx.Client]:
    """A cookie-keeping client with no control token, like a browser, signed in through
    ``/login`` unless ``signed_in`` is False. For the scheduler on 127.0.0.2 it connects from
    127.0.0.2 too (else the kernel picks 127.0.0.1 as the source)."""
    source = "127.0.0.2" if dash.url.startswith("http://127.0.0.2:") else None
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=dash.url, timeout=10, transport=transport, **kwargs) as client:
        if signed_in:
            csrf = page_csrf(client, "/login")
            response = client.post("/login", data={"csrf": csrf, "token": dash.token})
            assert response.status_code == 303, response.text
        yield client


def page_csrf(client: httpx.Client, path: str = "/") -> str:
    """The CSRF token of the page at ``path``, bound to this client's session cookie."""
    response = client.get(path)
    assert response.status_code == 200, response.text
    return csrf_of(response.text)


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf-token" content="([0-9a-f]+)"', html)
    assert match, "page carries no CSRF token"
    return match.group(1)


# ---------------------------------------------------------------------- signed-in reads
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


# ---------------------------------------------------------------------- a local process
def test_a_local_process_without_the_token_can_neither_read_nor_act(local: Any) -> None:
    """Issue 18: GET / hands a local process nothing it can act with (another OS user, an
    agent's sandbox user, connects from 127.0.0.1 too)."""
    run_id = local.queue_run("forever")
    with browser(local, signed_in=False) as client:
        first = client.get("/")
        assert first.status_code == 303 and first.headers["location"] == "/login?next=%2F"
        csrf = page_csrf(client, "/login")  # a session and its CSRF token, but no sign-in
        for path in ("/api/agents", f"/api/runs/{run_id}", "/api/live?path=/"):
            assert client.get(path).status_code == 401, path
        for path in (
            f"/api/runs/{run_id}/kill",
            "/api/agents/slow/run",
            f"/api/runs/{run_id}/approve",
            f"/api/runs/{run_id}/deny",
            "/api/agents/slow/state",
            "/api/scheduler/pause",
        ):
            for extra in ({"data": {"csrf": csrf}}, {"headers": {"X-CSRF-Token": csrf}}):
                assert client.post(path, **extra).status_code == 401, path
        forged = client.cookies.get("al_session")
        client.cookies.set("al_auth", f"9999999999.{'0' * 64}")
        assert client.get("/api/agents").status_code == 401 and forged
    assert local.state(run_id) == "running"
    local.kill(run_id)


def test_signed_in_post_needs_the_csrf_token_of_its_session(local: Any) -> None:
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


def test_sign_in_with_the_dashboard_password_and_sign_out(local: Any) -> None:
    with browser(local, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        wrong = client.post("/login", data={"csrf": csrf, "token": "not it"})
        assert wrong.status_code == 401
        answer = client.post("/login", data={"csrf": csrf, "token": local.password})
        assert answer.status_code == 303
        assert client.get("/").status_code == 200
        csrf = page_csrf(client)
        assert client.post("/logout", data={"csrf": csrf}).headers["location"] == "/login"
        assert client.get("/").status_code == 303


def test_dns_rebinding_host_is_refused(local: Any) -> None:
    with browser(local, signed_in=False, headers={"Host": "evil.example"}) as client:
        assert client.get("/").status_code == 421
        assert client.get("/login").status_code == 421
        assert client.get("/api/agents").status_code == 401
    port = local.url.rsplit(":", 1)[1]
    with browser(local, signed_in=False) as client:
        headers = {"Host": f"evil.example:{port}", **local.bearer}
        assert client.get("/api/agents", headers=headers).status_code == 401


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
    with browser(remote, signed_in=False) as client:
        csrf = page_csrf(client, "/login")  # a valid session and CSRF token, but no control token
        target = path.format(run="forever-0000")
        assert client.post(target).status_code == 401
        assert client.post(target, data={"csrf": csrf}).status_code == 401
        assert client.post(target, headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_non_local_reads_need_the_token(remote: Any) -> None:
    with browser(remote, signed_in=False) as client:
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


def test_non_local_client_must_name_the_configured_host(remote: Any) -> None:
    port = remote.url.rsplit(":", 1)[1]
    with browser(remote, signed_in=False, headers={"Host": f"localhost:{port}"}) as client:
        assert client.get("/login").status_code == 421
        assert client.get("/api/agents", headers=remote.bearer).status_code == 401


def test_non_local_bearer_token_needs_no_csrf(remote: Any) -> None:
    response = httpx.post(f"{remote.url}/api/agents/slow/run", headers=remote.bearer, timeout=10)
    assert response.status_code == 202


def test_login_sets_http_only_cookies_and_writes_need_csrf(remote: Any) -> None:
    with browser(remote, signed_in=False) as client:
        csrf = page_csrf(client, "/login")
        assert client.post("/login", data={"csrf": csrf, "token": "wrong"}).status_code == 401
        assert client.post("/login", data={"token": remote.token}).status_code == 403  # no CSRF
        before = client.cookies.get("al_session")
        response = client.post(
            "/login?next=%2F%2Fevil.example", data={"csrf": csrf, "token": remote.token}
        )
        assert (
            response.status_code == 303 and response.headers["location"] == "/"
        )  # no open redirect
        cookies = response.headers.get_list("set-cookie")
        assert all("HttpOnly" in c and "SameSite=lax" in c for c in cookies)
        assert {c.split("=", 1)[0] for c in cookies} == {"al_session", "al_auth"}
        assert client.cookies.get("al_session") != before  # a fresh session at sign-in
        assert remote.token not in " ".join(cookies)  # the cookie proves, it does not hold
        assert client.get("/").status_code == 200
        assert client.post("/api/agents/slow/run").status_code == 403  # signed in, no CSRF
        csrf = page_csrf(client)
        assert client.post("/api/agents/slow/run", data={"csrf": csrf}).status_code == 303
        assert client.post("/logout", data={"csrf": csrf}).headers["location"] == "/login"
        client.cookies.delete("al_auth")
        assert client.get("/").status_code == 303


def test_live_stream_sends_the_page_and_the_log_then_ends_with_the_run(local: Any) -> None:
    run_id = local.queue_run("slow")
    local.wait_for(lambda: local.state(run_id) == "done")
    with browser(local) as client:
        params = {"path": f"/runs/{run_id}", "after": "0"}
        body = client.get("/api/live", params=params).text  # a final run: the stream ends
        assert client.get("/api/live", params={"path": "/nowhere"}).status_code == 404
    blocks = [b for b in body.split("\n\n") if b.strip()]
    kinds = [b.split("\n", 1)[0] for b in blocks]
    assert kinds[-2:] == ["event: page", "event: end"] and "event: log" in kinds
    logs = [json.loads(b.split("data: ", 1)[1]) for b in blocks if b.startswith("event: log")]
    assert [entry["id"] for entry in logs] == sorted(entry["id"] for entry in logs)
    assert any("line 6" in entry["html"] for entry in logs)
    assert any('class="entry turn"' in entry["html"] for entry in logs)
    page = "\n".join(line[6:] for line in blocks[-2].split("\n")[1:])
    assert 'id="run-state"' in page and "done" in page


def test_the_deliveries_page_shows_the_event_a_generic_body_names(local: Any) -> None:
    """Issue 42 item 18: a generic sender that names its event in the body (``eventField``),
    not in a header: the deliveries page, ``/control/deliveries`` and ``al webhooks ls`` show
    the event the source parsed."""
    delivery = f"in-body-{time.time_ns()}"
    sent = httpx.post(
        f"{local.url}/webhooks/hooks",
        content=json.dumps({"event": "push", "ref": "refs/heads/main"}).encode(),
        headers={"X-Delivery-Id": delivery},
        timeout=10,
    )
    assert sent.status_code == 202 and sent.json()["agents"] == ["slow"], sent.text
    listed = local.get("/control/deliveries?limit=50").json()["deliveries"]
    assert [d["event"] for d in listed if d["delivery_id"] == delivery] == ["push"]
    with browser(local) as client:
        html = client.get("/deliveries").text
    (row,) = re.findall(rf"<tr data-delivery=[^\n]*{delivery}[^\n]*", html)
    assert "<td>push</td>" in row
    shown = local.sched.project.al("webhooks", "ls", "--limit", "50", check=True).stdout
    assert [line.split()[3] for line in shown.splitlines() if delivery in line] == ["push"]


# ---------------------------------------------------------------------- test and replay
def test_a_finished_run_is_saved_as_a_test_and_replayed(local: Any) -> None:
    run_id = local.queue_run("slow")
    local.wait_for(lambda: local.state(run_id) == "done")
    with browser(local) as client:
        html = client.get(f"/runs/{run_id}").text
        assert "Save as test" in html and ">Replay</button>" in html
    post = lambda path, body: httpx.post(  # noqa: E731
        f"{local.url}{path}", json=body, headers=local.bearer, timeout=30
    )

    saved = post(f"/api/runs/{run_id}/record", {"name": "from-dashboard"})
    assert saved.status_code == 201, saved.text
    written = saved.json()["written"]
    assert written[0] == "agents/slow/tests/from-dashboard.toml"
    root = local.sched.project.root
    assert all((root / path).is_file() for path in written)
    again = post(f"/api/runs/{run_id}/record", {"name": "from-dashboard"})
    assert again.status_code == 409 and "exist(s) already" in again.json()["error"]

    started = post(f"/api/runs/{run_id}/replay", {"from_turn": "2"})
    assert started.status_code == 202, started.text
    token = started.json()["replay"]
    answer = local.wait_for(
        lambda: (r := local.get(f"/api/replays/{token}").json())["state"] != "running" and r, 90
    )
    assert answer["state"] == "done", answer
    rows = {row["what"]: row for row in answer["result"]["rows"]}
    assert rows["return value"]["replay"] == '{"lines": 6}' and not rows["return value"]["differs"]
    assert any("turns 1-2 from the recording" in n for n in answer["result"]["notes"])
    with browser(local) as client:
        page = client.get(f"/runs/{run_id}/replays/{token}").text
        assert "rows differ" in page and "return value" in page
        assert client.get(f"/runs/{run_id}/replays/{'0' * 16}").status_code == 404
    bad = post(f"/api/runs/{run_id}/replay", {"from_turn": "-1"})
    assert bad.status_code == 400 and "expected a turn number" in bad.json()["error"]
    # Nothing of the replay is in the project's store: the run's agent has its one run.
    assert [
        r["id"] for r in local.runs("slow") if r["id"] == answer["result"]["replay"]["id"]
    ] == []

"""POST /webhooks/<name> on a real server with a real Engine and Store."""

from __future__ import annotations

import json
import socket

import pytest
from llamaherd_webhooks.ingest import REJECTED_BODY_KEPT


def test_signed_pull_request_routes_to_the_matching_agent_only(server):
    response = server.send("github", server.pull_request(), delivery="d-1")
    assert response.status_code == 202, response.text
    assert response.json()["agents"] == ["reviewer"] and response.json()["matched"] == 1
    assert response.json()["delivery"] == "d-1"
    assert server.depth() == {"reviewer": 1}
    [receipt] = server.receipts()
    assert receipt["delivery_id"] == "d-1" and receipt["matched"] == ["reviewer"]
    assert not any("signature" in name for name in receipt["headers"]), "no signatures kept"


def test_bad_or_missing_signature_is_401_and_nothing_queued(server):
    assert server.send("github", server.pull_request(), secret="wrong").status_code == 401
    assert server.send("github", server.pull_request(), secret=None).status_code == 401
    assert (
        server.send("hooks", {"event": "deploy", "env": "prod"}, secret="wrong").status_code == 401
    )
    assert server.depth() == {}
    dead = server.receipts(dead_letters=True)
    assert [d["status"] for d in dead] == [401, 401, 401]
    assert all(d["delivery_id"] is None for d in dead), "a forged delivery id is not kept"


def test_redelivery_is_acknowledged_not_queued_twice(server):
    first = server.send("github", server.pull_request(), delivery="same")
    again = server.send("github", server.pull_request(), delivery="same")
    assert first.status_code == 202
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert server.depth() == {"reviewer": 1}


def test_oversized_body_is_413(server):
    big = {"action": "opened", "padding": "x" * (2 * 1024 * 1024)}
    response = server.send("github", big)
    assert response.status_code == 413
    assert server.depth() == {}


@pytest.mark.parametrize("chunked", [False, True])
def test_an_oversized_body_is_answered_413_and_the_connection_closed(server, chunked):
    """The rest of the body is never read: the 413 says ``Connection: close`` and the server
    closes (it used to keep the connection and read, then discard, a declared gigabyte)."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(5)  # the rest of the body never comes: only a close ends this in time
    framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 1073741824"
    first = b"x" * (1024 * 1024 + 65536)  # past the source's 1 MiB limit
    sent = f"{len(first):x}\r\n".encode() + first + b"\r\n" if chunked else first
    sock.sendall(
        f"POST /webhooks/open HTTP/1.1\r\nHost: 127.0.0.1\r\n{framing}\r\n\r\n".encode() + sent
    )
    answer = b""
    try:
        while chunk := sock.recv(65536):  # socket.timeout here: the server kept reading
            answer += chunk
    except ConnectionResetError:  # closed with our unread bytes in its buffer: a reset
        pass
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split()[1] == b"413", answer[:200]
    assert b"connection: close" in head.lower()
    assert "larger than" in json.loads(body)["error"]
    assert server.depth() == {}


def test_filters_by_action_repo_branch_and_labels(server):
    assert server.send("github", server.pull_request(action="closed")).json()["agents"] == []
    assert server.send("github", server.pull_request(head="develop")).json()["agents"] == []
    assert server.send("github", server.pull_request(repo="acme/other")).json()["agents"] == []
    labelled = server.send("github", server.pull_request(repo="acme/other", labels=["triage"]))
    assert labelled.json()["agents"] == ["labeller"]
    push = {"ref": "refs/heads/release/2.0", "repository": {"full_name": "acme/widgets"}}
    assert server.send("github", push, event="push").json()["agents"] == ["pusher"]
    push["ref"] = "refs/heads/main"
    assert server.send("github", push, event="push").json() | {"delivery": None} == {
        "delivery": None,
        "matched": 0,
        "agents": [],
        "queued": [],
        "refused": {},
        "resumed": [],
    }
    assert server.depth() == {"labeller": 1, "pusher": 1}


def test_generic_source_with_match_predicates_and_custom_header(server):
    assert server.send("hooks", {"event": "deploy", "env": "dev"}).json()["matched"] == 0
    response = server.send("hooks", {"event": "deploy", "env": "prod"}, event=None)
    assert response.status_code == 202 and response.json()["agents"] == ["deployer"]


def test_unsigned_source_accepts_deliveries(server):
    response = server.send("open", {"hello": "world"}, secret=None)
    assert response.status_code == 202 and response.json()["agents"] == ["anything"]


def test_ping_is_200_and_not_queued(server):
    response = server.send("github", {"zen": "Speak like a human.", "hook_id": 1}, event="ping")
    assert response.status_code == 200 and response.json()["ignored"] == "ping"
    assert server.depth() == {}


def test_bad_json_is_400_and_unknown_source_404(server):
    assert server.send("github", None, body=b"{not json").status_code == 400
    assert server.send("github", None, body=b"[1]").status_code == 400
    assert server.http.post(f"{server.url}/webhooks/nope", data=b"{}").status_code == 404
    assert server.depth() == {}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"a": ' + b"[" * 600 + b"]" * 600 + b"}", "nested deeper than 100 levels"),
        (b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested deeper than 100 levels"),
        (b'{"number": 1' + b"0" * 400 + b"}", "holds an integer of more than 308 digits"),
    ],
    ids=["600-deep", "5000-deep", "400-digits"],
)
def test_a_delivery_beyond_a_shape_limit_says_which(server, body, why, caplog):
    """Signed, well-formed, but nested too deep or holding too long an integer: 422 naming
    the limit, in the answer and in one log line (it was "could not be processed")."""
    caplog.set_level("INFO", logger="llamaherd.webhooks")
    response = server.send("hooks", None, body=body, event="deploy")
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error.startswith(f"body {why}") and error.endswith("(the limit)"), error
    lines = [r.getMessage() for r in caplog.records if r.name == "llamaherd.webhooks"]
    assert lines == [f"webhook hooks: rejected with 422: {error}"], lines
    assert server.depth() == {}
    fine = server.send("hooks", {"a": [[[1]]], "number": 10**300}, event="deploy")
    assert fine.status_code == 202, fine.text


def test_webhook_event_payload_and_prompt(server):
    server.send("github", server.pull_request(), delivery="d-77")
    claimed = server.engine.store.claim({"reviewer": 1}, None, "test-host")
    item, run = claimed
    assert item.kind == "webhook" and item.source == "github"
    assert item.payload["number"] == 7 and item.payload["delivery"] == "d-77"
    assert item.payload["payload"]["pull_request"]["title"] == "Fix it"
    from llamaherd.prompts import trigger_block

    block = trigger_block(run.trigger, server.engine.registry)
    assert block.startswith("<webhook-trigger>") and "action: opened" in block
    assert json.dumps("Fix it") in block


def test_hibernating_agent_is_refused_and_recorded(server):
    server.engine.store.set_agent_state("reviewer", "hibernate", "test")
    response = server.send("github", server.pull_request())
    assert response.status_code == 202
    assert "reviewer" in response.json()["refused"]
    assert server.depth() == {}
    assert "refused" in server.receipts()[0]["result"]


def test_waiting_run_is_resumed_by_a_matching_delivery(server):
    store = server.engine.store
    run = store.create_run("quiet", "manual")
    store.set_waiting(
        run.id,
        {"type": "webhooks", "event": "pull_request", "repo": "acme/widgets", "number": 7},
        1e12,
    )
    other = store.create_run("quiet", "manual")
    store.set_waiting(other.id, {"type": "webhooks", "event": "pull_request", "number": 8}, 1e12)
    response = server.send("github", server.pull_request())
    assert response.json()["resumed"] == [run.id]
    assert store.get_run(run.id).state == "waiting"  # resumed through a queued resume item
    assert {r.id for r in store.waiting_runs()} >= {other.id}
    assert server.depth()["reviewer"] == 1


def test_unverified_dead_letters_keep_only_a_prefix_of_the_body(server):
    big = {"padding": "x" * 100_000}
    assert server.send("github", big, secret="forged").status_code == 401
    [dead] = server.receipts(dead_letters=True)
    assert len(dead["body"]) == REJECTED_BODY_KEPT


def test_deliveries_are_listed_and_replayed_with_the_control_token(server):
    from llamaherd.api import control_token

    token = control_token(server.engine.project.state_dir)
    bearer = {"Authorization": f"Bearer {token}"}
    server.send("github", server.pull_request(), delivery="d-orig")
    server.send("github", server.pull_request(), secret="wrong")
    listed = server.http.get(f"{server.url}/control/deliveries", headers=bearer).json()
    original, rejected = sorted(listed["deliveries"], key=lambda d: d["id"])
    assert original["delivery_id"] == "d-orig" and original["body_size"] > 0
    assert "body" not in original and rejected["status"] == 401
    dead = server.http.get(f"{server.url}/control/deliveries?dead=1", headers=bearer).json()
    assert [d["id"] for d in dead["deliveries"]] == [rejected["id"]]

    url = f"{server.url}/control/deliveries/{original['id']}/replay"
    assert server.http.post(url).status_code == 401  # replay needs the token
    replayed = server.http.post(url, headers=bearer)
    assert replayed.status_code == 202 and replayed.json()["agents"] == ["reviewer"]
    assert replayed.json()["delivery"].startswith(f"replay-{original['id']}-")
    assert server.depth() == {"reviewer": 2}
    assert server.receipts()[0]["delivery_id"] == replayed.json()["delivery"]
    missing = server.http.post(f"{server.url}/control/deliveries/99999/replay", headers=bearer)
    assert missing.status_code == 404
    forged = f"{server.url}/control/deliveries/{rejected['id']}/replay"
    refused = server.http.post(forged, headers=bearer)  # never verified: never run on a click
    assert refused.status_code == 409 and "only accepted deliveries" in refused.json()["error"]
    assert server.depth() == {"reviewer": 2}

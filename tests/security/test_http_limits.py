"""What a client can make the HTTP server hold (issue 18, items 5 and 7): credentials are
checked before a body is read, bodies and headers are bounded with clear 413/431 answers, a
client that never finishes its headers is dropped, and idle connections beyond the cap are
closed so that webhooks and the CLI keep working under a slowloris flood.

A real Engine serves the real app on 127.0.0.1; the attackers are raw sockets.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time

import pytest
import requests

from llamaherd.http_guard import MAX_HEADER_BYTES
from llamaherd.testing import wait_until

CONFIG = """
[gateway]
maxConnections = 40
headerTimeout = {header_timeout}

[webhooks.open]
type = "generic"
allowUnsigned = true
"""


def start(webhook_server, header_timeout: float):
    config = CONFIG.format(header_timeout=header_timeout)
    server = webhook_server(config, agents={"worker": '[[webhooks]]\nsource = "open"\n'})
    server.token = server.engine.app.state.control_token
    server.bearer = {"Authorization": f"Bearer {server.token}"}
    server.port = int(server.url.rsplit(":", 1)[1])
    return server


@pytest.fixture
def herd(webhook_server):
    return start(webhook_server, header_timeout=1.5)


@pytest.fixture
def capped(webhook_server):
    """A cap of 40 and a header deadline too far off to close anything during a test."""
    return start(webhook_server, header_timeout=600)


def connect(herd) -> socket.socket:
    return socket.create_connection(("127.0.0.1", herd.port), timeout=10)


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    """Status and JSON body of the one answer on ``sock`` (the server closes it after)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body or b"{}")


def closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(65536)  # end of file, or the 408 the server closes it with
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)


# ------------------------------------------------------------------ item 5: bodies and headers
def test_credentials_are_checked_before_the_body_is_read(herd):
    """An unauthenticated request declaring a body its route takes is answered without the
    server waiting for (or buffering) a byte of it."""
    for path, length in [("/gateway/status", 9000), ("/control/run", 1000000)]:
        sock = connect(herd)
        sock.settimeout(5)  # the body never comes: only an early answer ends this in time
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
        )
        status, body = read_answer(sock)
        sock.close()
        assert status == 401, (path, body)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_route_limit_is_answered_413(herd, chunked):
    big = json.dumps({"agent": "worker", "payload": {"pad": "x" * (2 * 1024 * 1024)}})
    data = (c for c in [big.encode()]) if chunked else big
    response = requests.post(herd.url + "/control/run", data=data, headers=herd.bearer, timeout=30)
    assert response.status_code == 413, response.text
    assert "request body larger than" in response.json()["error"]
    assert herd.depth() == {}
    small = requests.post(
        herd.url + "/control/run", json={"agent": "worker"}, headers=herd.bearer, timeout=10
    )
    assert small.status_code == 202, small.text


def test_unauthenticated_gateway_bodies_cost_nothing(herd):
    """The issue's reproduction: 200 MB bodies to /gateway/status are refused by their
    declared size, before a byte is read."""
    sock = connect(herd)
    sock.sendall(
        b"POST /gateway/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Length: 209715200\r\n\r\n" + b"x" * 65536
    )
    status, body = read_answer(sock)
    sock.close()
    assert status == 413 and "larger than" in body["error"]


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES + 1024, 8 * 1024 * 1024])
def test_oversized_headers_are_answered_431(herd, size):
    sock = connect(herd)
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * size + b"\r\n\r\n"
    try:
        sock.sendall(request)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before the whole header was sent
    status, body = read_answer(sock)
    sock.close()
    assert status == 431 and "request headers larger than" in body["error"]
    assert requests.get(herd.url + "/health", timeout=10).status_code == 200


def test_ordinary_requests_keep_their_connection(herd):
    """The limits add no ``Connection: close`` to a request that stays within them."""
    with requests.Session() as http:
        http.headers.update(herd.bearer)
        first = http.get(herd.url + "/control/stat", timeout=10)
        second = http.post(herd.url + "/control/run", json={"agent": "worker"}, timeout=10)
        assert first.status_code == 200 and second.status_code == 202
        assert "close" not in first.headers.get("connection", "")
        assert "close" not in second.headers.get("connection", "")


# ------------------------------------------------------------------ item 7: slowloris
def test_a_client_that_never_finishes_its_headers_is_dropped(herd):
    sock = connect(herd)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
    started = time.monotonic()
    status, body = read_answer(sock)
    sock.close()
    assert status == 408 and "not received in time" in body["error"]
    assert time.monotonic() - started < 10


def test_idle_connections_beyond_the_cap_cannot_lock_out_webhooks_or_the_cli(capped):
    """300 idle half-open sockets against a cap of 40: the server holds at most 40 of them
    (the longest idle go first), and a webhook delivery and a control call are answered."""
    idle = [connect(capped) for _ in range(300)]
    try:
        # A connection that sent part of its headers counts as idle too.
        for sock in idle[::10]:
            sock.sendall(b"POST /webhooks/open HTTP/1.1\r\n")

        def held() -> list[int]:
            return [n for n, sock in enumerate(idle) if not closed_by_server(sock)]

        wait_until(lambda: len(held()) <= 40, timeout=20, what="idle sockets beyond the cap closed")
        delivery = requests.post(capped.url + "/webhooks/open", json={"n": 1}, timeout=10)
        assert delivery.status_code == 202, delivery.text
        stat = requests.get(capped.url + "/control/stat", headers=capped.bearer, timeout=10)
        assert stat.status_code == 200
        assert capped.depth() == {"worker": 1}
        kept = held()
        assert len(kept) >= 30 and min(kept) >= 250  # only the excess went, oldest first
    finally:
        for sock in idle:
            sock.close()


# ------------------------------------------------------------------ issue 40: bodies in flight
TIGHT = """
[gateway]
bodyBudget = 65536
bodyTimeout = 3

[webhooks.open]
type = "generic"
allowUnsigned = true
"""


@pytest.fixture
def tight(webhook_server):
    """A budget of 64 KiB (8 KiB per credential) and a body deadline of 3 s."""
    server = webhook_server(TIGHT, agents={"worker": '[[webhooks]]\nsource = "open"\n'})
    server.token = server.engine.app.state.control_token
    server.port = int(server.url.rsplit(":", 1)[1])
    server.bodies = server.engine.app.state.body_budget.snapshot
    return server


def post_head(path: str, length: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{auth}Connection: close\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def answer_of(data: bytes) -> tuple[int, dict[str, str], dict]:
    """Status, headers and JSON body of an answer."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body or b"{}")


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_that_trickles_is_cut_with_408(tight):
    """A byte of the body every half second: it moves, but never ends in time (3 s here)."""
    sock = connect(tight)
    sock.sendall(post_head("/webhooks/open", 1000) + b"{")
    sock.settimeout(0.5)
    started, answer = time.monotonic(), b""
    while time.monotonic() - started < 15:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            with contextlib.suppress(OSError):  # closed meanwhile: its answer is to read
                sock.sendall(b" ")
            continue
        if not chunk:
            break
        answer += chunk
    took = time.monotonic() - started
    sock.close()
    status, _, body = answer_of(answer)
    assert status == 408 and body["error"] == "request body not received within 3 s", body
    assert 2.5 < took < 10, took
    assert tight.depth() == {}


def test_bodies_beyond_the_budget_wait_and_stalled_ones_make_room(tight):
    """Two bodies of 60 KB from two clients: the second finds the 64 KiB budget full (503,
    Retry-After) while the first still moves; once the first stalled (no byte for a second),
    a new one is admitted and the stalled one is cut (408)."""
    first = connect(tight)
    first.sendall(post_head("/webhooks/open", 60_000) + b"{" + b" " * 1000)
    second = connect(tight)
    second.sendall(post_head("/webhooks/open", 60_000))
    status, headers, body = answer_of(read_all(second))
    second.close()
    assert status == 503 and headers["retry-after"] == "1", (status, headers)
    assert "request bodies in flight fill the server's 65536 bytes" in body["error"]
    wait_until(lambda: tight.bodies()["stalled"] == 1, 10, what="the first body stalled")
    third = connect(tight)
    third.sendall(post_head("/webhooks/open", 60_000) + b'{"n": 3' + b" " * 59_992 + b"}")
    status, _, body = answer_of(read_all(first))
    first.close()
    assert status == 408 and body["error"] == "request body stalled while the server was full"
    status, _, body = answer_of(read_all(third))
    third.close()
    assert status == 202, body
    assert tight.depth() == {"worker": 1}
    assert tight.bodies()["bodies"] == 0


def test_one_credential_gets_its_share_then_429(tight):
    """A credential (here the control token) holds at most an eighth of the budget (8 KiB):
    its second body is told to wait (429, Retry-After) while another client still gets in."""
    held = connect(tight)
    held.sendall(post_head("/control/run", 6_000, tight.token) + b"{")
    again = connect(tight)
    again.sendall(post_head("/control/run", 6_000, tight.token))
    status, headers, body = answer_of(read_all(again))
    again.close()
    assert status == 429 and headers["retry-after"] == "1", (status, headers)
    assert "request bodies of this credential in flight exceed its 8192 bytes" in body["error"]
    delivery = requests.post(tight.url + "/webhooks/open", json={"n": 1}, timeout=10)
    assert delivery.status_code == 202
    held.close()
    wait_until(lambda: tight.bodies()["bodies"] == 0, 10, what="the held body released")

"""What a client can make the HTTP server hold (issue 18, items 5 and 7): credentials are
checked before a body is read, bodies and headers are bounded with clear 413/431 answers, a
client that never finishes its headers is dropped, and idle connections beyond the cap are
closed so that webhooks and the CLI keep working under a slowloris flood.

A real Engine serves the real app on 127.0.0.1; the attackers are raw sockets.
"""

from __future__ import annotations

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

"""The CLI's control client reads HTTP/1.1 as servers send it (lengths, chunks, interim
answers, bodies to the end of the connection, connections kept alive or closed), over TCP
and unix sockets, and turns an answer it cannot read into one clear error. Against a real
server on 127.0.0.1 that sends scripted bytes."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaherd.client import MAX_RESPONSE, ControlClient
from llamaherd.errors import CommandFailed, LlamaherdError


def answer(body: dict, *headers: str, status: str = "200 OK") -> bytes:
    data = json.dumps(body).encode()
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        head.append(f"Content-Length: {len(data)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


def chunked(body: dict) -> bytes:
    data = json.dumps(body).encode()
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    return (
        head
        + b"5;ext=1\r\n"
        + data[:5]
        + b"\r\n"
        + b"%x\r\n" % (len(data) - 5)
        + data[5:]
        + (b"\r\n0\r\nX-Trailer: yes\r\n\r\n")
    )


class Scripted:
    """Accepts connections; answers each request with the next scripted reply (bytes, and
    whether to close the connection after it). Records the requests and the connections."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.replies: list[tuple[bytes, bool]] = []
        self.requests: list[bytes] = []
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                self.requests.append(head + reader.read(length))
                reply, close = self.replies.pop(0)
                conn.sendall(reply)
                if close:
                    conn.shutdown(socket.SHUT_RDWR)
                    return


@pytest.fixture
def tcp() -> Iterator[tuple[Scripted, ControlClient]]:
    listener = socket.create_server(("127.0.0.1", 0))
    server = Scripted(listener)
    with ControlClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "t0ken") as client:
        yield server, client
    listener.close()


def test_lengths_chunks_and_interim_answers_on_one_kept_alive_connection(tcp) -> None:
    server, client = tcp
    server.replies = [
        (answer({"n": 1}), False),
        (chunked({"n": 2, "pad": "x" * 300}), False),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + answer({"n": 3}), False),
    ]
    assert client.get("/control/stat") == {"n": 1}
    assert client.post("/control/run", {"agent": "a"})["n"] == 2
    assert client.get("/control/health") == {"n": 3}
    assert server.connections == 1
    first, second = server.requests[0], server.requests[1]
    assert first.startswith(b"GET /control/stat HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer t0ken\r\n" in first and b"\r\nHost: 127.0.0.1:" in first
    assert second.endswith(b'\r\n\r\n{"agent": "a"}')
    assert b"\r\nContent-Type: application/json\r\n" in second


def test_a_closed_connection_is_opened_again(tcp) -> None:
    server, client = tcp
    server.replies = [
        (answer({"n": 1}, "Connection: close"), True),
        (b'HTTP/1.0 200 OK\r\n\r\n{"n": 2}', True),  # no length: the body runs to the end
        (answer({"n": 3}), True),  # kept alive by its headers, then closed by the server
        (answer({"n": 4}), False),
    ]
    assert [client.get("/control/stat")["n"] for _ in range(4)] == [1, 2, 3, 4]
    assert server.connections == 4  # the fourth request found the third connection closed


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}", "cut short"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "not an HTTP response"),
        (f"HTTP/1.1 200 OK\r\nContent-Length: {MAX_RESPONSE + 1}\r\n\r\n".encode(), "too large"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", "header line too long"),
    ],
)
def test_an_answer_it_cannot_read_is_one_clear_error(tcp, reply, said) -> None:
    server, client = tcp
    server.replies = [(reply, True), (reply, True)]  # the retry on a fresh connection too
    with pytest.raises(CommandFailed) as raised:
        client.get("/control/stat")
    assert str(raised.value).startswith("scheduler at http://127.0.0.1:")
    assert said in str(raised.value)


def test_an_error_answer_is_the_schedulers_message(tcp) -> None:
    server, client = tcp
    server.replies = [(answer({"error": "no agent named x"}, status="404 Not Found"), False)]
    with pytest.raises(LlamaherdError, match="^no agent named x$") as raised:
        client.get("/control/agents/x")
    assert not isinstance(raised.value, CommandFailed)  # a usage error: exit 2


def test_over_a_unix_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "control.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    server = Scripted(listener)
    server.replies = [(answer({"n": 1}), False), (answer({"n": 2}), False)]
    with ControlClient("http://127.0.0.1:1", "t0ken", socket_path=path) as client:
        assert [client.get("/control/stat")["n"] for _ in range(2)] == [1, 2]
    assert server.connections == 1 and b"\r\nHost: localhost\r\n" in server.requests[0]
    listener.close()


def test_a_line_break_never_makes_a_second_request(tcp) -> None:
    server, client = tcp
    with pytest.raises(ValueError, match="line break"):
        client.get("/control/runs/x HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /control/stat")
    assert server.connections == 0

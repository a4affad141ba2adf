"""Request bodies held open cannot eat the scheduler's memory (issue 40, items 1 and 2).

A run opened 600 connections to its gateway socket, each with an almost complete 4 MiB body,
and waited: the scheduler buffered every body before answering (2.45 GB, kept after the run).
Anyone who reaches the port did the same with 600 bodies of 1 MB and a bad signature on a
webhook (703 MB, kept). Now each route takes what its arguments hold, checked before a byte is
read and as chunks arrive; the body bytes in flight have a budget for the process and a share
of it per credential (a run's token), answered 503/429 with Retry-After; when the budget is
full, bodies that stalled are cut to make room for new ones.

Each attack runs against a real ``al start``, whose memory is read from /proc: its peak stays
under 200 MB, ``/health`` keeps answering within 100 ms, a signed delivery from another client
is queued (202) during the attack, and its memory is back under 120 MB within 10 s of the end.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import resource
import selectors
import socket
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamaherd.testing import OfflineProject, wait_until

pytestmark = pytest.mark.timeout(120)

CONNECTIONS = 600
SECRET = "held-bodies-secret"
PEAK_MIB, AFTER_MIB, HEALTH_SECONDS = 200, 120, 0.1
PROJECT = """
[webhooks.hooks]
type = "generic"
credential = "ci"
"""
QUICK = '[[turns]]\ntext = "done"\n'
# Writes its gateway credentials where the test reads them, then stays running.
HOLDER = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "env | grep '^AL_RUN_' > ENV_FILE; sleep 100", timeout = 110}}]

[[turns]]
text = "done"
"""
MIB = 1024 * 1024


# ----------------------------------------------------------------------- the attackers
class Attack:
    """Connections that each send a request (its head, then its body from a shared buffer,
    as fast as the server reads) and then hold it open, pumped by a thread; a connection the
    server answers stops sending (as a client does) and keeps the status it got."""

    def __init__(self, connect: Callable[[], socket.socket]):
        self.connect = connect
        self.selector = selectors.DefaultSelector()
        self.conns: list[SimpleNamespace] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def add(self, requests: list[tuple[bytes, bytes]]) -> Attack:
        for head, body in requests:
            sock = self.connect()
            sock.setblocking(False)
            conn = SimpleNamespace(sock=sock, parts=[memoryview(head), memoryview(body)])
            conn.answer, conn.closed = b"", False
            self.conns.append(conn)
            self.selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
        return self

    def _pump(self) -> None:
        while not self.stopped.is_set():
            for key, events in self.selector.select(0.05):
                conn = key.data
                if events & selectors.EVENT_READ:
                    self._read(conn)
                elif conn.parts:
                    self._send(conn)

    def _read(self, conn: SimpleNamespace) -> None:
        try:
            data = conn.sock.recv(65536)
        except OSError:
            data = b""
        conn.answer += data
        conn.parts = []  # answered: send no more
        if not data:
            conn.closed = True
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _send(self, conn: SimpleNamespace) -> None:
        try:
            sent = conn.sock.send(conn.parts[0][: 256 * 1024])
        except OSError:  # refused and closed: its answer is to read
            sent, conn.parts = 0, [b""]
        conn.parts[0] = conn.parts[0][sent:]
        if not conn.parts[0]:
            conn.parts.pop(0)
        if not conn.parts:
            self.selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def settled(self) -> bool:
        """Every connection sent all it had, or was answered."""
        return all(not conn.parts for conn in self.conns)

    def settle(self) -> None:
        wait_until(self.settled, 60, what="every attacker sent its request or was answered")

    def statuses(self) -> Counter[int]:
        """Answers by status (0: not answered, still held open)."""
        return Counter(
            int(conn.answer.split(b" ", 2)[1]) if conn.answer else 0 for conn in self.conns
        )

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for conn in self.conns:
            conn.sock.close()


def head(path: str, framing: str, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{extra}{framing}\r\n\r\n"
    ).encode()


def chunked(size: int, piece: int = 64 * 1024) -> bytes:
    """A chunked body of ``size`` bytes, without its last chunk (held open)."""
    return (f"{piece:x}\r\n".encode() + b"x" * piece + b"\r\n") * (size // piece)


# ----------------------------------------------------------------------- the scheduler
def rss_mib(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


@pytest.fixture
def files_for_the_attack() -> None:
    """Room for 600 connections on each side (the scheduler inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the open-file limit ({hard}) is too low for {CONNECTIONS} connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        yield
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    else:
        yield


@pytest.fixture
def herd(tmp_path: Path, scheduler, files_for_the_attack) -> SimpleNamespace:
    creds = tmp_path / "creds"
    project = OfflineProject(tmp_path / "proj", creds=creds)
    (creds / "webhook_secret" / "ci").mkdir(parents=True)
    (creds / "webhook_secret" / "ci" / "secret").write_text(SECRET)
    with (project.root / "config.toml").open("a") as fh:
        fh.write(PROJECT)
    project.add_scripted_agent("worker", '[[webhooks]]\nsource = "hooks"\n', QUICK)
    env_file = tmp_path / "run-env"
    project.add_scripted_agent("holder", "timeout = 115", HOLDER.replace("ENV_FILE", str(env_file)))
    sched = scheduler(project)
    info = json.loads((project.root / ".al" / "scheduler.json").read_text())
    return SimpleNamespace(
        project=project,
        sched=sched,
        pid=sched.proc.pid,
        port=int(sched.url.rsplit(":", 1)[1]),
        socket=info["socket"],
        env_file=env_file,
    )


def tcp(herd: SimpleNamespace) -> Callable[[], socket.socket]:
    return lambda: socket.create_connection(("127.0.0.1", herd.port), timeout=10)


def unix(herd: SimpleNamespace) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(herd.socket)
        return sock

    return connect


def health_seconds(herd: SimpleNamespace) -> float:
    """How long ``GET /health`` took on a new connection (it must answer 200)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", herd.port, timeout=10)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    assert response.status == 200
    return time.monotonic() - started


def signed_delivery(herd: SimpleNamespace) -> tuple[int, str]:
    body = json.dumps({"event": "deploy", "n": str(uuid.uuid4())}).encode()
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    conn = http.client.HTTPConnection("127.0.0.1", herd.port, timeout=10)
    try:
        headers = {
            "Content-Type": "application/json",
            "X-Signature-256": f"sha256={signature}",
            "X-Delivery-Id": str(uuid.uuid4()),
        }
        conn.request("POST", "/webhooks/hooks", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def bodies(herd: SimpleNamespace) -> dict[str, int]:
    """The scheduler's request bodies in flight (``/control/health``)."""
    return herd.sched.get("/control/health").json()["bodies"]


def check_the_attack(herd: SimpleNamespace, attack: Attack) -> Counter[int]:
    """While ``attack`` holds its bodies: the scheduler's memory, ``/health`` and a signed
    delivery; then the memory once it ended. The statuses the attackers were answered."""
    attack.settle()
    # The bodies admitted have stalled: the server knows they no longer move.
    wait_until(lambda: bodies(herd)["stalled"] == bodies(herd)["bodies"], 10, what="stalled")
    held = bodies(herd)
    times = [health_seconds(herd) for _ in range(20)]
    status, text = signed_delivery(herd)
    assert status == 202, text
    times += [health_seconds(herd) for _ in range(20)]
    peak = rss_mib(herd.pid, "VmHWM")
    statuses = attack.statuses()
    attack.close()
    started = time.monotonic()
    after = wait_until(
        lambda: (rss := rss_mib(herd.pid)) < AFTER_MIB and rss,
        10,
        0.2,
        what=f"the scheduler's memory back under {AFTER_MIB} MB",
    )
    figures = {
        "peak": peak,
        "after": after,
        "back_within": time.monotonic() - started,
        "health_median": statistics.median(times),
        "health_max": max(times),
        "held": held["bodies"],
        "held_bytes": held["bytes"],
    }
    print(f"[held bodies] {dict(statuses)} {figures}")
    assert peak < PEAK_MIB, figures
    assert "Traceback" not in herd.sched.read_log()
    # Every probe answered (health_seconds); most within 100 ms even on a loaded CI machine.
    assert sorted(times)[int(len(times) * 0.9)] < HEALTH_SECONDS, times
    return statuses


def test_600_bodies_held_open_on_a_runs_gateway_socket(herd: SimpleNamespace):
    assert herd.project.al("run", "holder", "--no-follow").returncode == 0
    env = wait_until(
        lambda: herd.env_file.exists() and herd.env_file.read_text().count("AL_RUN_") >= 2,
        30,
        what="the run's gateway credentials",
    )
    assert env
    values = dict(line.split("=", 1) for line in herd.env_file.read_text().split())
    auth = (
        f"Authorization: Bearer {values['AL_RUN_TOKEN']}\r\nX-AL-Run-Id: {values['AL_RUN_ID']}\r\n"
    )
    big = b"x" * (4 * MIB - 1)  # almost complete: the last byte never comes
    held = 250_000  # within /gateway/call's limit: admitted while the run's share lasts
    third = CONNECTIONS // 3
    # Those within the limit first (so that the run's share is theirs), then the 4 MiB ones.
    attack = Attack(unix(herd))
    try:
        attack.add(
            [(head("/gateway/call", f"Content-Length: {held}", auth), big[: held - 1])] * third
        )
        attack.settle()
        attack.add([(head("/gateway/setenv", f"Content-Length: {4 * MIB}", auth), big)] * third)
        attack.add(
            [(head("/gateway/call", "Transfer-Encoding: chunked", auth), chunked(4 * MIB))] * third
        )
        statuses = check_the_attack(herd, attack)
    finally:
        attack.close()
    # Each declared 4 MiB refused unread, each chunked one cut at the route's limit (or the
    # run's share); of those within the limit, the run's share held and the rest told to wait.
    share = 32 * MIB // 8 // held
    assert statuses[413] >= third and statuses[429] >= third - share, statuses
    assert 0 < statuses[0] <= share and sum(statuses.values()) == CONNECTIONS, statuses


def test_600_unauthenticated_bodies_held_open_on_a_webhook(herd: SimpleNamespace):
    bad = "X-Signature-256: sha256=" + "0" * 64 + "\r\n"
    body = b"x" * (MIB - 1)  # the source's maxBodyBytes, but for the byte that never comes
    request = (head("/webhooks/hooks", f"Content-Length: {MIB}", bad), body)
    attack = Attack(tcp(herd))
    try:
        statuses = check_the_attack(herd, attack.add([request] * CONNECTIONS))
    finally:
        attack.close()
    # The budget's worth held, the rest told to wait; the signed delivery found the budget
    # full and a stalled body was cut to make room for it (and so may a late attacker have).
    assert statuses[503] > CONNECTIONS // 2 and statuses[408] >= 1, statuses
    assert statuses[0] < 32 * MIB // MIB, statuses
    assert herd.sched.read_log().count("HTTP 503 for POST /webhooks/hooks") >= 1

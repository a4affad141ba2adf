"""A Messages API stand-in on 127.0.0.1: real HTTP, replies queued by each test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest


class ModelServer(ThreadingHTTPServer):
    """Answers POSTs from ``replies`` (status, body, headers, delay) and records each request
    as {path, headers, body}. With nothing queued it answers 500."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: list[tuple[int, Any, dict[str, str], float]] = []
        self.requests: list[dict[str, Any]] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) is not an error here

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reply(
        self, status: int, body: Any, headers: dict[str, str] | None = None, delay: float = 0.0
    ) -> None:
        self.replies.append((status, body, headers or {}, delay))


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.requests.append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": json.loads(raw),
            }
        )
        status, body, headers, delay = (
            self.server.replies.pop(0)
            if self.server.replies
            else (500, {"error": "none queued"}, {}, 0)
        )
        time.sleep(delay)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_server():
    server = ModelServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def chain_env(tmp_project, monkeypatch):
    """Build a ModelChain for an agent over the real plugin registry, recording events."""
    from llamaherd.models import CircuitBreaker, ModelChain
    from llamaherd.plugins import registry

    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0.01")
    events: list[tuple[str, dict[str, Any]]] = []
    clock = SimpleNamespace(now=0.0)

    def make(config: str, models: list[str], keys: dict[tuple[str, str], dict[str, str]]):
        tmp_project.config(config)
        tmp_project.add_agent("bot", f"models = {json.dumps(models)}\n")
        project = tmp_project.load()
        return ModelChain(
            project,
            project.agent("bot"),
            registry(),
            lambda t, i: keys.get((t, i)),
            lambda kind, data: events.append((kind, data)),
            breaker=CircuitBreaker(60, lambda: clock.now),
        )

    return SimpleNamespace(make=make, events=events, clock=clock)

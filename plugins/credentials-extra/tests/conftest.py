"""A stand-in for the services' APIs: real HTTP on 127.0.0.1, routes set per test."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Answer = tuple[int, Any]  # status, JSON body
Route = Callable[[dict[str, Any]], Answer]


class ServiceServer(ThreadingHTTPServer):
    """Answers ``routes[(method, path)]`` (path with its query) and records every request as
    {method, path, headers (lower-case names), body (bytes)}; 404 for anything else."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[tuple[str, str], Route] = {}
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def route(self, method: str, path: str, answer: Route) -> None:
        self.routes[(method, path)] = answer


class _Handler(BaseHTTPRequestHandler):
    server: ServiceServer

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        request = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": self.rfile.read(length),
        }
        self.server.requests.append(request)
        route = self.server.routes.get((self.command, self.path))
        status, body = route(request) if route else (404, {"message": "Not Found"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def service() -> Iterator[ServiceServer]:
    server = ServiceServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()

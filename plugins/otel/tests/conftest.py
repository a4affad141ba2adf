"""An OTLP/HTTP collector stand-in on 127.0.0.1 that decodes what it receives (protobuf)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


def _value(any_value: Any) -> Any:
    """An OTLP ``AnyValue`` as Python."""
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


class Receiver(ThreadingHTTPServer):
    """Records every span (as a dict) and metric point it is sent."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, list[dict[str, Any]]] = {}
        self.paths: list[str] = []
        self.headers_seen: list[dict[str, str]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def traces(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        {
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "start": span.start_time_unix_nano / 1e9,
                            "end": span.end_time_unix_nano / 1e9,
                            "attributes": attributes(span.attributes),
                            "status": span.status.code,
                            "events": [e.name for e in span.events],
                            "resource": resource,
                        }
                    )

    def metric_points(self, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )

        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    points = getattr(metric, kind).data_points
                    self.metrics[metric.name] = [
                        {
                            "attributes": attributes(p.attributes),
                            "value": getattr(p, "as_int", 0) or getattr(p, "as_double", 0)
                            if kind in ("sum", "gauge")
                            else p.count,
                        }
                        for p in points
                    ]


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
            if self.path == "/v1/traces":
                self.server.traces(body)
            elif self.path == "/v1/metrics":
                self.server.metric_points(body)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()

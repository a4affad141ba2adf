"""``al doctor``: the collector ``[telemetry]`` exports to accepts OTLP/HTTP."""

from __future__ import annotations

import os
from typing import Any

from llamaherd.api import Finding
from llamaherd_otel.settings import Settings

TIMEOUT = 5.0
DEFAULT_ENDPOINT = "http://localhost:4318"
GRPC_PORT = ":4317"


class TelemetryCheck:
    name = "telemetry"
    description = "The OpenTelemetry collector of [telemetry]: it accepts OTLP/HTTP exports."

    def check(self, project: Any, registry: Any) -> list[Finding]:
        settings = Settings.of(project)
        if settings is None:
            return []
        base = (
            settings.endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
        )
        url = Settings(base, settings.service_name).url("traces")
        subject = f"collector {url}"
        problem = _refused(url, settings.headers)
        if problem is None:
            return [Finding.ok(subject, f"accepts traces (service.name {settings.service_name})")]
        if GRPC_PORT in base:
            problem += "; 4317 is OTLP/gRPC's port: llamaherd exports OTLP/HTTP (usually 4318)"
        return [Finding.error(subject, problem)]


def _refused(url: str, headers: dict[str, str]) -> str | None:
    """Why the collector refuses an empty export request (a valid one), or None."""
    import requests

    try:
        response = requests.post(
            url,
            data=b"",  # an empty ExportTraceServiceRequest
            headers={**headers, "Content-Type": "application/x-protobuf"},
            timeout=TIMEOUT,
        )
    except requests.RequestException as exc:
        return f"does not answer ({type(exc).__name__})"
    if not response.ok:
        return f"answered HTTP {response.status_code} to an empty export"
    return None

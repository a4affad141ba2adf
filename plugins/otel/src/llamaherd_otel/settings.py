"""The project's ``[telemetry]`` table, spelt as Action Llama spells it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_SERVICE = "llamaherd"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "enabled": {
            "type": "boolean",
            "default": False,
            "description": "Export a trace per run and run metrics.",
        },
        "provider": {
            "enum": ["otel", "none"],
            "default": "otel",
            "description": '"otel" (OTLP over HTTP) or "none" (export nothing).',
        },
        "endpoint": {
            "type": "string",
            "pattern": "^https?://",
            "description": "OTLP/HTTP collector base URL, e.g. `http://localhost:4318` (traces go "
            "to `/v1/traces`, metrics to `/v1/metrics`); default: "
            "`$OTEL_EXPORTER_OTLP_ENDPOINT`, else `http://localhost:4318`.",
        },
        "serviceName": {
            "type": "string",
            "minLength": 1,
            "default": DEFAULT_SERVICE,
            "description": "`service.name` of what is exported.",
        },
        "headers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "HTTP headers sent with every export (an API key for a hosted "
            "collector: kept out of logs).",
        },
        "samplingRate": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": 1,
            "description": "Share of runs traced (0 to 1); metrics count every run.",
        },
    },
    "additionalProperties": False,
}


class TelemetryKey:
    """``[telemetry]`` of the project ``config.toml``: this plugin acts on it."""

    name = "telemetry"
    description = "OpenTelemetry export (llamaherd-otel): a trace per run and run metrics."
    schema = SCHEMA


@dataclass(frozen=True)
class Settings:
    """An enabled ``[telemetry]`` table, read."""

    endpoint: str | None
    service_name: str
    headers: dict[str, str] = field(default_factory=dict, hash=False)
    sampling_rate: float = 1.0

    @classmethod
    def of(cls, project: Any) -> Settings | None:
        """The project's settings, or None when it exports nothing."""
        table = project.config.get("telemetry")
        if not isinstance(table, dict) or table.get("enabled") is not True:
            return None
        if table.get("provider", "otel") != "otel":
            return None
        return cls(
            endpoint=table.get("endpoint"),
            service_name=str(table.get("serviceName") or DEFAULT_SERVICE),
            headers={str(k): str(v) for k, v in (table.get("headers") or {}).items()},
            sampling_rate=float(table.get("samplingRate", 1.0)),
        )

    def url(self, signal: str) -> str | None:
        """The OTLP/HTTP URL of ``signal`` (``traces``, ``metrics``) under the endpoint."""
        if not self.endpoint:
            return None
        base = self.endpoint.rstrip("/")
        for known in ("/v1/traces", "/v1/metrics"):
            base = base.removesuffix(known)
        return f"{base}/v1/{signal}"

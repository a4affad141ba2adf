"""The CLI's client for a running scheduler's control API."""

from __future__ import annotations

from typing import Any

from llamaherd.auth import control_token
from llamaherd.scheduler import scheduler_info
from llamaherd.types import LlamaherdError


class ControlClient:
    """Talks to the scheduler found in ``.al/scheduler.json``; ``None`` from ``find`` if none."""

    def __init__(self, project: Any, info: dict[str, Any]):
        import requests

        self.url = info["url"]
        self.pid = info["pid"]
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {control_token(project.state_dir)}"

    @classmethod
    def find(cls, project: Any) -> ControlClient | None:
        info = scheduler_info(project.state_dir)
        return cls(project, info) if info else None

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import requests

        try:
            response = self.session.request(method, self.url + path, json=body, timeout=30)
        except requests.RequestException as exc:
            raise LlamaherdError(
                f"scheduler at {self.url} did not answer: {type(exc).__name__}"
            ) from None
        try:
            data = response.json()
        except ValueError:
            data = {"error": response.text[:200]}
        if response.status_code >= 400:
            raise LlamaherdError(
                data.get("error") or f"scheduler answered HTTP {response.status_code}"
            )
        return data

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("POST", path, body or {})

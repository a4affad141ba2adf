"""Where the read commands get their data: the project's store on this machine, or a
scheduler's control API (``al stat --env NAME`` and the like). Both answer the same JSON-able
shapes (runs as ``llamaherd.status.run_dict``), so each command prints one way.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote, urlencode

from llamaherd.errors import LlamaherdError


class Reader(Protocol):
    def agents(self) -> list[dict[str, Any]]:
        """One row per agent (``llamaherd.status.agent_rows``)."""

    def stat(self) -> dict[str, Any]:
        """What ``al stat`` shows: ``{"scheduler": scheduler_status, "agents": rows}``."""

    def runs(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        """Recent runs, newest first."""

    def not_run(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        """Triggers flow control skipped, dropped or superseded, newest first."""

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run by id or unique prefix."""

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """A run's events with id > ``after``, oldest first."""

    def stats(self, agent: str | None, since: float) -> dict[str, Any]:
        """Run history since ``since`` (epoch seconds): ``Store.stats``."""

    def agent_names(self) -> list[str]:
        """The project's agents."""

    def check_agent(self, name: str) -> None:
        """Raise when the project has no agent ``name``."""


class StoreReader:
    """Reads a store directly: the local project's (or an engine's)."""

    def __init__(self, store: Any, project: Any = None, registry: Any = None):
        self.store = store
        self.project = project
        self.registry = registry

    def agents(self) -> list[dict[str, Any]]:
        from llamaherd.status import agent_rows

        return agent_rows(self.project, self.store, self.registry)

    def stat(self) -> dict[str, Any]:
        from llamaherd.status import database_status

        return {
            "scheduler": local_scheduler_status(self.project, self.store),
            "agents": self.agents(),
            "database": database_status(self.project, self.store),
            "now": self.store.clock(),  # what "fires in", "resets in" count from
        }

    def runs(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        from llamaherd.status import run_dict

        return [run_dict(run) for run in self.store.runs(agent=agent, limit=limit)]

    def not_run(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        return self.store.not_run(agent, limit)

    def run(self, run_id: str) -> dict[str, Any] | None:
        from llamaherd.status import run_dict

        found = self.store.find_run(run_id)
        return run_dict(found) if found else None

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        return self.store.events(run_id, after)

    def stats(self, agent: str | None, since: float) -> dict[str, Any]:
        return self.store.stats(agent, since)

    def agent_names(self) -> list[str]:
        return list(self.project.agents)

    def check_agent(self, name: str) -> None:
        self.project.agent(name)


class ControlReader:
    """Reads through a scheduler's control API (``llamaherd.client.ControlClient``)."""

    def __init__(self, client: Any):
        self.client = client

    def agents(self) -> list[dict[str, Any]]:
        return list(self.stat()["agents"])

    def stat(self) -> dict[str, Any]:
        return self.client.get("/control/stat")

    def runs(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        query = {"limit": limit, **({"agent": agent} if agent else {})}
        return list(self.client.get(f"/control/runs?{urlencode(query)}")["runs"])

    def not_run(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        query = {"limit": limit, **({"agent": agent} if agent else {})}
        return list(self.client.get(f"/control/runs?{urlencode(query)}").get("not_run", []))

    def run(self, run_id: str) -> dict[str, Any] | None:
        try:
            return self.client.get(f"/control/runs/{quote(run_id, safe='')}")
        except LlamaherdError as exc:
            if str(exc).startswith("no such run"):
                return None
            raise

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        path = f"/control/runs/{quote(run_id, safe='')}/events?after={after}"
        return list(self.client.get(path)["events"])

    def stats(self, agent: str | None, since: float) -> dict[str, Any]:
        query = {"since": since, **({"agent": agent} if agent else {})}
        return self.client.get(f"/control/stats?{urlencode(query)}")

    def agent_names(self) -> list[str]:
        return [row["agent"] for row in self.agents()]

    def check_agent(self, name: str) -> None:
        names = self.agent_names()
        if name not in names:
            raise LlamaherdError(
                f"{self.client.url}: no such agent {name!r} (agents: {', '.join(names) or 'none'})"
            )


def local_scheduler_status(project: Any, store: Any) -> dict[str, Any]:
    """``scheduler_status`` as this checkout sees it: its own scheduler (``.al/scheduler.json``),
    else a live one heartbeating into a shared (non-SQLite) database."""
    import time

    from llamaherd.local import scheduler_info
    from llamaherd.scheduler import host_stale_after
    from llamaherd.status import scheduler_status

    info = scheduler_info(project.state_dir)
    hosts = []
    if info is None and not project.database_url.startswith("sqlite"):
        now = time.time()
        hosts = [h for h in store.hosts() if now - h["heartbeat_at"] < host_stale_after()]
    return scheduler_status(project, info, hosts)

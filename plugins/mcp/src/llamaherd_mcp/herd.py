"""What the MCP tools do, in plain Python: the project as an owner operates it.

Where each answer comes from:

- while a scheduler runs for the project (``.al/scheduler.json``), everything goes through its
  control API (``ControlClient``): that is where runs execute, so a kill reaches the run, a
  pause wakes its dispatcher at once, and reads see exactly what ``al stat`` shows;
- with none, reads come from the project's store (the history is all there; nothing is live),
  and the changes that need no live run (pause, resume, agent state, approve, deny) are made in
  the store, as the CLI makes them. Starting a run needs a scheduler (``start`` starts one): a
  run executes inside it, and this server must keep answering while the run goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from llamaherd.api import (
    CommandFailed,
    ControlClient,
    Engine,
    LlamaherdError,
    Store,
    agent_rows,
    answer_suspension,
    load_project,
    pid_alive,
    resolve_environment,
    run_dict,
    set_agent_state,
    state_of,
)

FINAL = ("done", "error", "timeout", "killed")
NO_SCHEDULER = "no scheduler is running for this project: start one with the al_start tool"


class Herd:
    """One project, as the MCP tools operate it (see the module docstring)."""

    def __init__(self, root: Path, registry: Any, environment: str | None = None):
        self.root = root
        self.registry = registry
        self.environment = environment  # -E NAME (else $AL_ENV, else .env.toml's binding)
        self._store: Any = None
        self._remote: Any = None  # the deployed environment's scheduler, once reached
        self._looked = False

    # ------------------------------------------------------------------ where answers come from

    def project(self) -> Any:
        """The project as it is on disk now (agents may come and go while the server runs),
        with its environment's layers."""
        return load_project(self.root, self.environment)

    def client(self) -> ControlClient | None:
        """The deployed environment's scheduler (its channel kept open while the server
        runs), else the project's running one here."""
        if not self._looked:
            binding = resolve_environment(self.environment, self.root)
            self._remote = binding and ControlClient.for_environment(binding)
            self._looked = True
        return self._remote or ControlClient.find(self.project())

    def close(self) -> None:
        if self._remote is not None:
            self._remote.close()

    def store(self) -> Any:
        if self._store is None:
            project = self.project()
            self._store = Store.open(project.database_url, str(project.root))
        return self._store

    def source(self) -> str:
        """Where answers come from now, for the tools' replies."""
        client = self.client()
        if client is None:
            return "the project's store (no scheduler)"
        return f"scheduler pid {client.pid}" if client.pid else f"the scheduler at {client.url}"

    @contextmanager
    def _engine(self) -> Iterator[Any]:
        """An Engine on the project's database, for a change made without a scheduler."""
        engine = Engine(self.project())
        try:
            yield engine
        finally:
            engine.close()

    def _through(self, path: str, body: dict[str, Any], local: Callable[[Any], Any]) -> Any:
        """POST ``body`` to the scheduler's ``path``, else ``local(engine)``."""
        client = self.client()
        if client is not None:
            return client.post(path, body)
        with self._engine() as engine:
            return local(engine)

    # ------------------------------------------------------------------ reads

    def stat(self) -> dict[str, Any]:
        client = self.client()
        if client is not None:
            return client.get("/control/stat")
        project = self.project()
        rows = agent_rows(project, self.store(), self.registry)
        return {"scheduler": {"running": False}, "agents": rows}

    def runs(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        if agent:
            self.project().agent(agent)
        client = self.client()
        if client is not None:
            query = urlencode({"limit": limit, **({"agent": agent} if agent else {})})
            return client.get(f"/control/runs?{query}")["runs"]
        return [run_dict(r) for r in self.store().runs(agent=agent, limit=limit)]

    def run(self, target: str) -> dict[str, Any]:
        """A run by id or unique prefix, or an agent's latest run."""
        if target in self.project().agents:
            latest = self.runs(target, 1)
            if not latest:
                raise LlamaherdError(f"agent {target!r} has no runs yet")
            return latest[0]
        client = self.client()
        if client is not None:
            return client.get(f"/control/runs/{quote(target, safe='')}")
        found = self.store().find_run(target)
        if found is None:
            raise LlamaherdError(f"no such run or agent {target!r} (the al_runs tool lists runs)")
        return run_dict(found)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        client = self.client()
        if client is not None:
            return client.get(f"/control/runs/{quote(run_id, safe='')}/events")["events"]
        return self.store().events(run_id)

    def agent_state(self, agent: str) -> dict[str, Any]:
        client = self.client()
        if client is not None:
            return client.get(f"/control/agents/{quote(agent, safe='')}/state")
        with self._engine() as engine:
            return state_of(engine, agent)

    # ------------------------------------------------------------------ changes

    def start_run(self, agent: str, prompt: str | None) -> int:
        """Queue a manual run on the scheduler; the work item's id."""
        self.project().agent(agent)
        client = self.client()
        if client is None:
            raise CommandFailed(NO_SCHEDULER)
        payload = {"prompt": prompt} if prompt else {}
        return client.post("/control/run", {"agent": agent, "payload": payload})["items"][0]

    def wait_for_item(self, agent: str, item: int, timeout: float) -> dict[str, Any] | None:
        """The run that work item ``item`` became, once it has ended (None: not within
        ``timeout`` seconds; the latest state is then returned by a later call)."""
        deadline = time.monotonic() + timeout
        while True:
            run = next((r for r in self.runs(agent, 200) if r["item_id"] == item), None)
            if run is not None and run["state"] in FINAL:
                return run
            if time.monotonic() >= deadline:
                return run
            time.sleep(0.2)

    def kill(self, target: str) -> list[str]:
        client = self.client()
        if client is None:
            raise CommandFailed(NO_SCHEDULER + " (without one, no run is live)")
        return client.post("/control/kill", {"target": target})["killed"]

    def pause(self, agent: str | None, paused: bool) -> None:
        if agent:
            self.project().agent(agent)
        client = self.client()
        if client is not None:
            client.post("/control/pause" if paused else "/control/resume", {"agent": agent})
        else:
            self.store().set_paused(agent, paused)

    def set_state(self, agent: str, state: str, cause: str) -> dict[str, Any]:
        return self._through(
            f"/control/agents/{quote(agent, safe='')}/state",
            {"state": state, "cause": cause},
            lambda engine: set_agent_state(engine, agent, state, cause),
        )

    def answer(self, run_id: str, approve: bool, cause: str) -> dict[str, Any]:
        verb = "approve" if approve else "deny"
        return self._through(
            f"/control/runs/{quote(run_id, safe='')}/{verb}",
            {"cause": cause},
            lambda engine: answer_suspension(engine, run_id, approve, cause),
        )

    # ------------------------------------------------------------------ the scheduler

    def start_scheduler(self) -> str:
        client = self.client()
        if client is not None:
            return f"a scheduler is already running (pid {client.pid}, {client.url})"
        project = self.project()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "llamaherd",
                "--project",
                str(project.root),
                "start",
                "--detach",
                *(["--env", self.environment] if self.environment else []),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ.copy(),
        )
        if done.returncode != 0:
            raise CommandFailed((done.stderr or done.stdout).strip() or "al start failed")
        return done.stdout.strip()

    def stop_scheduler(self) -> str:
        client = self.client()
        if client is None:
            return "no scheduler is running for this project"
        try:
            client.post("/control/stop")
        except CommandFailed:
            # The stop may have been taken and the scheduler gone before its answer reached us.
            deadline = time.monotonic() + 5.0
            while client.pid is not None and pid_alive(client.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if client.pid is None or pid_alive(client.pid):
                raise
        which = f"scheduler {client.pid}" if client.pid else f"the scheduler at {client.url}"
        return f"{which} is stopping (active runs get its grace period)"

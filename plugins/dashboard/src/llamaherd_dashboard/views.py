"""What the dashboard shows, as JSON-able dicts built from the project and the store.

Blocking (database reads): call these from a thread. The same dicts feed the pages and ``/api/``.
"""

from __future__ import annotations

from typing import Any

from llamaherd.api import FINAL, agent_rows, human_wait, is_suspended, next_fire, run_dict
from llamaherd.api import event_summary as summary

RUN_LIMIT = 25
AGENT_EVENT_LIMIT = 20


def badge(row: dict[str, Any]) -> str:
    """The state an agents-table row shows: ``waiting`` when its only live runs wait."""
    if row["state"] == "idle" and row["waiting"]:
        return "waiting"
    return row["state"]


def agents(engine: Any) -> list[dict[str, Any]]:
    """The rows ``al stat`` shows."""
    return agent_rows(engine.project, engine.store, engine.registry, engine.clock())


def _triggers(engine: Any, agent: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if agent.get("schedule"):
        when = next_fire(engine.registry, agent, engine.clock())
        found.append({"kind": "schedule", "schedule": agent.get("schedule"), "next_fire": when})
    for hook in agent.get("webhooks", []) or []:
        filters = {key: value for key, value in hook.items() if key != "source"}
        found.append({"kind": "webhook", "source": hook.get("source"), "filters": filters})
    return found


def _credentials(engine: Any, agent: Any) -> list[dict[str, Any]]:
    """Names of the credentials the agent lists, and whether each is in the store: never values."""
    from llamaherd.api import parse_ref

    rows = []
    for ref in agent.credentials:
        type_name, instance = parse_ref(ref)
        rows.append({"name": ref, "present": engine.credentials.exists(type_name, instance)})
    return rows


def _with_duration(run: Any, now: float) -> dict[str, Any]:
    data = run_dict(run)
    end = run.finished_at if run.finished_at is not None else now
    data["duration"] = None if run.started_at is None else max(0.0, end - run.started_at)
    return data


def agent(engine: Any, name: str) -> dict[str, Any] | None:
    """One agent: its settings, triggers, credential names, status row and recent runs."""
    found = engine.project.agents.get(name)
    if found is None:
        return None
    now = engine.clock()
    row = next(r for r in agents(engine) if r["agent"] == name)
    runtime = found.runtime
    return {
        "name": name,
        "description": found.description,
        "models": found.models,
        "scale": found.scale,
        "timeout": found.timeout,
        "runtime": {key: runtime[key] for key in ("type", "run_as") if key in runtime},
        "triggers": _triggers(engine, found),
        "credentials": _credentials(engine, found),
        "status": row,
        "runs": [
            _with_duration(run, now) for run in engine.store.runs(agent=name, limit=RUN_LIMIT)
        ],
        "events": engine.store.agent_events(name, AGENT_EVENT_LIMIT),
    }


def log_line(event: dict[str, Any]) -> dict[str, Any]:
    """A run event with the one-line summary and the output the log view prints."""
    data = event.get("data") or {}
    output = data.get("output") if isinstance(data, dict) else None
    return {**event, "summary": summary(data), "output": str(output) if output else ""}


def run(engine: Any, run_id: str, with_events: bool = False) -> dict[str, Any] | None:
    """One run (id or unique prefix): its row, state history and status messages."""
    found = engine.store.find_run(run_id)
    if found is None:
        return None
    events = engine.store.events(found.id)
    data = {
        "run": _with_duration(found, engine.clock()),
        "final": found.state in FINAL,
        # What the run's page offers: Reply to a run waiting for a human; Say to a live one.
        "human_wait": human_wait(found),
        "can_say": found.state in ("running", "waiting") and not is_suspended(found),
        "states": [{"at": e["at"], **e["data"]} for e in events if e["type"] == "state"],
        "status_messages": engine.store.status_messages(found.id),
    }
    if with_events:
        data["events"] = [log_line(e) for e in events]
    return data

"""What the dashboard shows, as JSON-able dicts built from the project and the store.

Blocking (database reads): call these from a thread. The same dicts feed the pages and ``/api/``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from typing import Any

from llamaherd.api import (
    FINAL,
    SETTABLE_STATES,
    agent_rows,
    agent_triggers,
    budget_line,
    key_line,
    run_dict,
    serving_status,
)
from llamaherd.api import event_summary as summary

HEADER_SECONDS = 5.0
# The last scheduler status of each engine, with when it was taken (see ``header``).
_headers: weakref.WeakKeyDictionary[Any, tuple[float, dict[str, Any]]] = weakref.WeakKeyDictionary()

RUN_LIMIT = 25
AGENT_EVENT_LIMIT = 20
QUEUE_LIMIT = 50
PAGE_SIZE = 50
DAY = 86400.0
HOUR = 3600.0
SPARK_HOURS = 24
SPARK_HEIGHT = 8
RUN_STATES = ("queued", "running", "waiting", "done", "error", "timeout", "killed")
TRIGGER_KINDS = ("manual", "scheduled", "webhook", "agent", "chat")
# Time ranges of the runs page: label -> seconds back from now.
RANGES = {"1h": HOUR, "24h": DAY, "7d": 7 * DAY, "all": None}
# Overview sort keys: the row field each sorts by (None last).
SORTS = {
    "agent": "agent",
    "state": "state",
    "queued": "queued",
    "last": "last_finished_at",
    "next": "next_fire",
    "runs": "runs_24h",
    "rate": "success_rate",
    "cost": "cost_24h",
}


def header(engine: Any) -> dict[str, Any]:
    """The scheduler line every page starts with: up/paused/stopped, since, version, config
    current or changed on disk, the hosts sharing the database. All but the pause is taken at
    most every ``HEADER_SECONDS`` (whether the config is current means hashing every agent's
    files: too much for each render of a live page); the pause is read each time."""
    now = time.monotonic()
    taken = _headers.get(engine)
    if taken is None or now - taken[0] > HEADER_SECONDS:
        taken = _headers[engine] = (now, serving_status(engine))
    status = {**taken[1], "paused": engine.store.paused()[0]}
    if not status["running"]:
        status["label"] = "stopped"
    else:
        status["label"] = "paused" if status["paused"] else "up"
    return status


def agents(engine: Any) -> list[dict[str, Any]]:
    """The rows ``al stat`` shows."""
    return agent_rows(engine.project, engine.store, engine.registry, engine.clock())


def spark(counts: list[int]) -> str:
    """An SVG path of hourly counts (x: hour, y: 0 at the top), a flat stretch as one ``h``
    (most hours of most agents are alike: the path stays short for 200 rows)."""
    top = max(counts) or 1
    ys = [SPARK_HEIGHT - round(SPARK_HEIGHT * c / top) for c in counts]
    path, flat = f"M0 {ys[0]}", 0
    for before, y in zip(ys, ys[1:], strict=False):
        if y == before:
            flat += 1
            continue
        path += (f"h{flat}" if flat else "") + f"l1{y - before:+d}"
        flat = 0
    return path + (f"h{flat}" if flat else "")


def _rate(activity: Mapping[str, Any]) -> float | None:
    return activity["done"] / activity["finished"] if activity.get("finished") else None


def overview(engine: Any, sort: str = "agent", text: str = "") -> dict[str, Any]:
    """Every agent with its state, live status, queue, last result, next fire, and over the
    last 24 h: runs per hour, success rate and cost. Filtered by ``text`` (a substring of the
    name or state) and sorted by ``sort`` (a key of ``SORTS``, ``-`` first for descending)."""
    now = engine.clock()
    since = now - SPARK_HOURS * HOUR
    activity = engine.store.activity(since, HOUR, SPARK_HOURS)
    spend = engine.store.costs(since)["agents"]
    statuses: dict[str, str] = {}
    for run in engine.store.runs(states=("running", "waiting"), limit=10_000):
        if run.status and run.agent not in statuses:  # newest first: the latest live status
            statuses[run.agent] = run.status
    rows = []
    for row in agents(engine):
        if text and text.lower() not in f"{row['agent']} {row['state']}".lower():
            continue
        seen = activity.get(row["agent"]) or {"runs": 0, "per_bucket": [0] * SPARK_HOURS}
        row.update(
            badge=row["state"],
            status=statuses.get(row["agent"]),
            runs_24h=seen["runs"],
            success_rate=_rate(seen),
            cost_24h=spend.get(row["agent"]),
            spark=spark(seen["per_bucket"]),
        )
        rows.append(row)
    key = sort.lstrip("-") if sort.lstrip("-") in SORTS else "agent"
    field = SORTS[key]
    present = [r for r in rows if r[field] is not None]
    present.sort(key=lambda r: r[field], reverse=sort.startswith("-"))
    rows = present + [r for r in rows if r[field] is None]
    return {
        "agents": rows,
        "sort": sort if key in SORTS else "agent",
        "text": text,
        "totals": {
            "agents": len(rows),
            "active": sum(r["active"] for r in rows),
            "queued": sum(r["queued"] for r in rows),
            "runs_24h": sum(r["runs_24h"] for r in rows),
            "cost_24h": sum(spend.values()) if spend else None,
        },
        "settable": SETTABLE_STATES,
    }


def _with_duration(run: Any, now: float) -> dict[str, Any]:
    data = run_dict(run)
    end = run.finished_at if run.finished_at is not None else now
    data["duration"] = None if run.started_at is None else max(0.0, end - run.started_at)
    return data


def _credentials(engine: Any, agent: Any) -> list[dict[str, Any]]:
    """Names of the credentials the agent lists, and whether each is in the store: never values."""
    from llamaherd.api import parse_ref

    rows = []
    for ref in agent.credentials:
        type_name, instance = parse_ref(ref)
        rows.append({"name": ref, "present": engine.credentials.exists(type_name, instance)})
    return rows


def chart(values: list[float | None]) -> dict[str, Any]:
    """An agent's chart of ``values`` (oldest first): the y axis's top (the largest value, in
    the chart's unit) and each bar's height in percent of it."""
    top = max((v for v in values if v), default=0)
    bars = [{"value": v, "height": round(100 * (v or 0) / (top or 1))} for v in values]
    return {"top": top, "bars": bars}


def agent(engine: Any, name: str) -> dict[str, Any] | None:
    """One agent: settings, every trigger, credential names, status, queued items, recent runs
    with their duration and cost (and charts of both), 24 h success rate and cost."""
    found = engine.project.agents.get(name)
    if found is None:
        return None
    now = engine.clock()
    row = next(r for r in agents(engine) if r["agent"] == name)
    runtime = found.runtime
    runs = [_with_duration(run, now) for run in engine.store.runs(agent=name, limit=RUN_LIMIT)]
    oldest = min((r["created_at"] for r in runs), default=now)
    spend = engine.store.costs(oldest, agent=name)
    for run in runs:
        run["cost"] = spend["runs"].get(run["id"])
    day = engine.store.activity(now - DAY, DAY, 1).get(name) or {}
    chronological = runs[::-1]
    paused_all, paused = engine.store.paused()
    return {
        "name": name,
        "description": found.description,
        "models": found.models,
        "scale": found.scale,
        "timeout": found.timeout,
        "runtime": {key: runtime[key] for key in ("type", "run_as") if key in runtime},
        "triggers": [vars(info) for info in agent_triggers(found, now)],
        "credentials": _credentials(engine, found),
        "status": {**row, "badge": row["state"]},
        "settable": SETTABLE_STATES,
        # `al pause AGENT` (resumed here) and `al pause` (the whole scheduler: Resume all).
        "paused": {"agent": name in paused, "all": paused_all},
        "queue": [
            {"id": item.id, "kind": item.kind, "created_at": item.created_at, "source": item.source}
            for item in engine.store.queued_items(name, QUEUE_LIMIT)
        ],
        "runs": runs,
        "charts": {
            "runs": [{"id": r["id"], "state": r["state"]} for r in chronological],
            "duration": chart([r["duration"] for r in chronological]),
            "cost": chart([r["cost"] for r in chronological]),
        },
        "day": {"runs": day.get("runs", 0), "success_rate": _rate(day)},
        "cost_24h": engine.store.costs(now - DAY, agent=name)["agents"].get(name),
        "events": engine.store.agent_events(name, AGENT_EVENT_LIMIT),
        "flow": _flow(row, now),
    }


def _flow(row: dict[str, Any], now: float) -> dict[str, Any] | None:
    """Flow control and budgets as ``al stat AGENT`` words them: why it waits, its controls,
    each key's state, its spend against each budget."""
    if not ({"held", "flow", "budget"} & row.keys()):
        return None
    flow = row.get("flow") or {}
    return {
        "held": row.get("held"),
        "controls": flow.get("controls", []),
        "keys": [key_line(entry, now) for entry in flow.get("keys", [])],
        "budgets": [budget_line(budget, now) for budget in row.get("budget") or []],
    }


def runs(engine: Any, query: Mapping[str, str]) -> dict[str, Any]:
    """The runs page: runs of every agent matching the filters in ``query`` (agent, state,
    kind, range, q), newest first, ``PAGE_SIZE`` per page (``page``, from 1)."""
    filters = {key: str(query.get(key) or "") for key in ("agent", "state", "kind", "range", "q")}
    page = max(1, int(query["page"])) if str(query.get("page", "")).isdigit() else 1
    back = RANGES.get(filters["range"] or "all")
    now = engine.clock()
    found = engine.store.find_runs(
        agent=filters["agent"] or None,
        states=(filters["state"],) if filters["state"] in RUN_STATES else None,
        trigger_kind=filters["kind"] or None,
        since=None if back is None else now - back,
        text=filters["q"].strip() or None,
        limit=PAGE_SIZE + 1,
        offset=(page - 1) * PAGE_SIZE,
    )
    return {
        "runs": [_with_duration(run, now) for run in found[:PAGE_SIZE]],
        "filters": filters,
        "page": page,
        "more": len(found) > PAGE_SIZE,
        "agent_names": sorted(engine.project.agents),
        "run_states": RUN_STATES,
        "trigger_kinds": TRIGGER_KINDS,
        "ranges": list(RANGES),
    }


def log_line(event: dict[str, Any]) -> dict[str, Any]:
    """A run event with the one-line summary and the output the log view prints."""
    data = event.get("data") or {}
    output = data.get("output") if isinstance(data, dict) else None
    return {**event, "summary": summary(data), "output": str(output) if output else ""}


def entries(events: list[dict[str, Any]], turn: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Run events as the conversation shows them, each a ``log_line`` with the model turn it
    belongs to (``turn``: model calls before these events). Returns (entries, turns so far)."""
    shown = []
    for event in events:
        if event["type"] == "model_call":
            turn += 1
        shown.append({**log_line(event), "turn": turn})
    return shown, turn


def run(engine: Any, run_id: str, with_events: bool = False) -> dict[str, Any] | None:
    """One run (id or unique prefix): its row, state history, status messages, and the
    conversation (``with_events``), with tokens and cost per turn."""
    from llamaherd.api import human_wait, is_suspended  # what runs agents: not at the start

    found = engine.store.find_run(run_id)
    if found is None:
        return None
    events = engine.store.events(found.id)
    calls = [e["data"] for e in events if e["type"] == "model_call"]
    costs = [c.get("cost_usd") for c in calls if isinstance(c.get("cost_usd"), int | float)]
    data = {
        "run": _with_duration(found, engine.clock()),
        "final": found.state in FINAL,
        # What the run's page offers: Reply to a run waiting for a human; Say to a live one.
        "human_wait": human_wait(found),
        "can_say": found.state in ("running", "waiting") and not is_suspended(found),
        "states": [{"at": e["at"], **e["data"]} for e in events if e["type"] == "state"],
        "status_messages": engine.store.status_messages(found.id),
        "turns": len(calls),
        "cost": sum(costs) if costs else None,
        "last_event": events[-1]["id"] if events else 0,
    }
    if with_events:
        data["events"] = entries(events)[0]
    return data


def delivery_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Receipts from ``/control/deliveries`` with their event name: as the source parsed it
    (a generic sender's may be in its body), else (a dead letter, a receipt from before it was
    kept) from the header that carries it (``X-GitHub-Event``, ``X-Event``...)."""
    shown = []
    for row in rows:
        headers = row.get("headers") or {}
        header = next((v for k, v in headers.items() if k.lower().endswith("-event")), None)
        shown.append({**row, "event": row.get("event") or header, "dead": row["status"] >= 400})
    return shown

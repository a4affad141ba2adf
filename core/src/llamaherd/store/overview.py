"""Reads for an operator's overview (the dashboard): runs found by filters, activity and spend
per agent over a window, the queued items of an agent (and removing one), and a cheap marker
that changes whenever something an overview shows may have changed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from llamaherd.store.connection import columns, guarded, marks
from llamaherd.store.queue import _ITEM_COLUMNS, Queue, WorkItemRow
from llamaherd.store.runs import FINAL_STATES, RUN_COLUMNS, RunRow

# Subqueries whose values together change when a run, its log, an agent's state, the queue or
# a pause changes (ids only grow; a removed queued item changes the count).
_MARKER = (
    "SELECT (SELECT MAX(id) FROM run_events), (SELECT MAX(id) FROM agent_events), "
    "(SELECT MAX(id) FROM work_items), "
    "(SELECT COUNT(*) FROM work_items WHERE state = 'queued'), "
    "(SELECT MAX(updated_at) FROM agent_states), (SELECT COUNT(*) FROM paused), "
    "(SELECT MAX(id) FROM status_messages)"
)
_SEARCHED = ("id", "agent", "status", "reason")


class Overview(Queue):
    """What an operator's overview reads (``llamaherd-dashboard``), beside ``Store.stats``."""

    @guarded
    def find_runs(
        self,
        *,
        agent: str | None = None,
        states: tuple[str, ...] | None = None,
        trigger_kind: str | None = None,
        since: float | None = None,
        until: float | None = None,
        text: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[RunRow]:
        """Runs matching every filter given, newest first: ``text`` is a case-insensitive
        substring of the run's id, agent, status or reason."""
        where, params = _run_filters(agent, states, trigger_kind, since, until, text)

        def build() -> str:
            return (
                f"SELECT {columns(RUN_COLUMNS)} FROM runs WHERE {where} "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?"
            )

        return self._run_rows(
            self._statement(("find_runs", where), build), [*params, limit, offset]
        )

    @guarded
    def count_runs(
        self,
        *,
        agent: str | None = None,
        states: tuple[str, ...] | None = None,
        trigger_kind: str | None = None,
        since: float | None = None,
    ) -> int:
        """How many runs ``find_runs`` with these filters would page through."""
        where, params = _run_filters(agent, states, trigger_kind, since, None, None)
        statement = self._statement(
            ("count_runs", where), lambda: f"SELECT COUNT(*) FROM runs WHERE {where}"
        )
        return int(self._value(statement, tuple(params)))

    @guarded
    def activity(self, since: float, width: float, buckets: int) -> dict[str, dict[str, Any]]:
        """Per agent, runs created since ``since``: {runs, finished, done, per_bucket} where
        ``per_bucket`` counts them in ``buckets`` windows of ``width`` seconds from ``since``."""
        sql = self._statement(
            ("activity",), lambda: "SELECT agent, state, created_at FROM runs WHERE created_at >= ?"
        )
        found: dict[str, dict[str, Any]] = {}
        for agent, state, created in self._exec(sql, (since,)).fetchall():
            row = found.setdefault(
                agent, {"runs": 0, "finished": 0, "done": 0, "per_bucket": [0] * buckets}
            )
            row["runs"] += 1
            row["finished"] += state in FINAL_STATES
            row["done"] += state == "done"
            row["per_bucket"][min(buckets - 1, int((created - since) // width))] += 1
        return found

    @guarded
    def costs(self, since: float, agent: str | None = None) -> dict[str, dict[str, float]]:
        """USD spent by the runs created since ``since`` (the ``cost_usd`` of their
        ``model_call`` events whose price was known): {"agents": {agent: usd}, "runs":
        {run_id: usd}}. The window selects runs, whose events are then found by their
        ``(run_id, id)`` index: never a scan of every event kept."""
        # The window's runs, then their events by IN: planners seek each run's events by the
        # (run_id, id) index, and the database sums the costs.
        window = "SELECT {} FROM runs WHERE created_at >= ?" + (" AND agent = ?" if agent else "")
        params = (since,) if agent is None else (since, agent)
        owners_sql = self._statement(
            ("cost_runs", agent is None), lambda: window.format("id, agent")
        )
        events_sql = self._statement(
            ("cost_events", agent is None),
            lambda: (
                f"SELECT run_id, SUM({self._cost_field()}) FROM run_events "
                f"WHERE type = 'model_call' AND run_id IN ({window.format('id')}) GROUP BY run_id"
            ),
        )
        owners = dict(self._exec(owners_sql, params).fetchall())
        agents: dict[str, float] = defaultdict(float)
        runs: dict[str, float] = {}
        for run_id, cost in self._exec(events_sql, params).fetchall():
            if cost is not None and run_id in owners:  # None: no call's price was known
                agents[owners[run_id]] += cost
                runs[run_id] = float(cost)
        return {"agents": dict(agents), "runs": dict(runs)}

    def _cost_field(self) -> str:
        """SQL for a ``model_call`` event's ``cost_usd`` (NULL when unknown): summed by the
        database, so no event's JSON is decoded in Python."""
        if self._pg:
            return "CAST(CAST(data AS JSON) ->> 'cost_usd' AS DOUBLE PRECISION)"
        return "json_extract(data, '$.cost_usd')"

    @guarded
    def queued_items(self, agent: str, limit: int = 100) -> list[WorkItemRow]:
        """The agent's queued items, oldest (next to run) first."""
        sql = self._statement(
            ("queued_items",),
            lambda: (
                f"SELECT {columns(_ITEM_COLUMNS)} FROM work_items "
                "WHERE state = 'queued' AND agent = ? ORDER BY id LIMIT ?"
            ),
        )
        return [self._item(row) for row in self._exec(sql, (agent, limit)).fetchall()]

    @guarded
    def runs_of_keys(self, keys: list[str]) -> dict[str, list[str]]:
        """The runs (ids, oldest first) started from the work items queued with each of
        ``keys`` (their ``dedupe_key``): where a trigger's event went, e.g. a webhook
        delivery's runs on the dashboard."""
        if not keys:
            return {}
        sql = self._statement(
            ("runs_of_keys", len(keys)),
            lambda: (
                "SELECT w.dedupe_key, r.id FROM work_items w JOIN runs r ON r.item_id = w.id "
                f"WHERE w.dedupe_key IN ({marks(keys)}) ORDER BY r.created_at"
            ),
        )
        found: dict[str, list[str]] = {}
        for key, run_id in self._exec(sql, list(keys)).fetchall():
            found.setdefault(key, []).append(run_id)
        return found

    @guarded
    def drop_queued(self, item_id: int, reason: str = "removed from the queue") -> bool:
        """Delete one queued item (False when it is no longer queued); an agent call it carried
        is settled as an error with ``reason``, so its caller stops waiting."""
        m = self._m
        where = (m.WorkItem.id == item_id) & (m.WorkItem.state == "queued")
        with self._write():
            carried = m.WorkItem.select(m.WorkItem.call_id).where(where)
            m.Call.update(state="error", error=reason, finished_at=self._clock()).where(
                m.Call.id.in_(carried) & m.Call.run_id.is_null() & (m.Call.state == "pending")
            ).execute()
            return m.WorkItem.delete().where(where).execute() == 1

    @guarded
    def change_marker(self) -> tuple[Any, ...]:
        """A value that differs whenever runs, their logs, agent states, the queue or pauses
        changed since it was taken (one cheap query: what a live page polls)."""
        return tuple(self._exec(_MARKER).fetchone())


def _run_filters(
    agent: str | None,
    states: tuple[str, ...] | None,
    trigger_kind: str | None,
    since: float | None,
    until: float | None,
    text: str | None,
) -> tuple[str, list[Any]]:
    """The WHERE clause and parameters of ``find_runs`` / ``count_runs``."""
    filters: list[tuple[str, list[Any]]] = [
        ("agent = ?", [agent]) if agent else ("", []),
        (f"state IN ({marks(states)})", list(states)) if states else ("", []),
        ("trigger_kind = ?", [trigger_kind]) if trigger_kind else ("", []),
        ("created_at >= ?", [since]) if since is not None else ("", []),
        ("created_at < ?", [until]) if until is not None else ("", []),
    ]
    if text:
        like = f"%{text.lower()}%"
        searched = " OR ".join(f"LOWER(COALESCE({c}, '')) LIKE ?" for c in _SEARCHED)
        filters.append((f"({searched})", [like] * len(_SEARCHED)))
    where = " AND ".join(clause for clause, _ in filters if clause) or "1 = 1"
    return where, [value for _, values in filters for value in values]

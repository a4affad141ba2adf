"""Runs: their rows and state machine, events, status messages, return values, waits, stats.

A run moves only through ``TRANSITIONS`` (``transition``, one place, every change recorded as a
``state`` event); entering a final state releases its locks, retires its work item and settles
its call, in the same transaction.
"""

from __future__ import annotations

import functools
import operator
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import peewee as pw

from llamaherd.inbound import loads
from llamaherd.store.connection import (
    Connection,
    StoreError,
    assignments,
    columns,
    grouped,
    guarded,
    marks,
)
from llamaherd.store.schema import JSONText, dumps
from llamaherd.write_budget import CALL_BYTES, TRANSCRIPT_COPIES

RUN_STATES = ("queued", "running", "waiting", "done", "error", "timeout", "killed")
FINAL_STATES = ("done", "error", "timeout", "killed")
# The one place allowed transitions live.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "queued": ("running", "killed", "error"),
    "running": ("waiting", "done", "error", "timeout", "killed"),
    "waiting": ("running", "error", "timeout", "killed"),
    "done": (),
    "error": (),
    "timeout": (),
    "killed": (),
}
EXIT_CODES = {"done": 0, "error": 1, "timeout": 124, "killed": 137}


class InvalidTransition(StoreError):
    """A run state change that TRANSITIONS does not allow."""


@dataclass
class RunRow:
    id: str
    agent: str
    state: str
    trigger_kind: str
    item_id: int | None
    host: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str | None
    status: str | None
    return_value: Any
    call_depth: int
    caller_run: str | None
    call_id: int | None
    rerun_count: int
    rerun_requested: bool
    sandbox: dict[str, Any] | None  # runtime handle for attach after restart
    transcript: list[dict[str, Any]] | None
    wait_filter: dict[str, Any] | None
    wait_deadline: float | None
    deadline: float | None
    input_tokens: int
    output_tokens: int
    token_hash: str | None  # sha256 of the run's gateway token
    trigger: dict[str, Any]  # the work item's kind/payload/prompt/source/recovery, copied at claim
    flow_key: str | None = None  # its concurrency key under the agent's [flow]


RUN_COLUMNS = tuple(f.name for f in fields(RunRow))
_run_values = operator.attrgetter(*RUN_COLUMNS)
# Columns update_run may set; state goes through transition(), identity never changes.
_PLAIN_RUN_COLUMNS = frozenset(RUN_COLUMNS) - {"id", "agent", "state", "created_at"}


def statements(q: Callable[[str], str], pg: bool) -> dict[str, str]:
    """The runs' prepared statements (``Connection._sql``)."""
    runs = f"SELECT {columns(RUN_COLUMNS)} FROM runs"
    return {
        "running": "SELECT agent, COUNT(*) FROM runs WHERE state = 'running' GROUP BY agent",
        "running_one": q("SELECT COUNT(*) FROM runs WHERE state = 'running' AND agent = ?"),
        "get_run": q(f"{runs} WHERE id = ?"),
        "lock_run": q(f"{runs} WHERE id = ?{' FOR UPDATE' if pg else ''}"),
        "runs_prefix": q(f"{runs} WHERE SUBSTR(id, 1, ?) = ? LIMIT 2"),
        "waiting": f"{runs} WHERE state = 'waiting' ORDER BY created_at",
        "wait_filters": (
            "SELECT id, agent, wait_filter FROM runs WHERE state = 'waiting' ORDER BY created_at"
        ),
        "expired": q(f"{runs} WHERE state = 'waiting' AND wait_deadline <= ?"),
        "next_deadline": "SELECT MIN(wait_deadline) FROM runs WHERE state = 'waiting'",
        "event": q('INSERT INTO run_events (run_id, "at", "type", data) VALUES (?, ?, ?, ?)'),
        "status": q('INSERT INTO status_messages (run_id, "at", "text") VALUES (?, ?, ?)'),
        "events": q(
            'SELECT id, "at", "type", data FROM run_events WHERE run_id = ? AND id > ? ORDER BY id'
        ),
        "status_messages": q(
            'SELECT id, "at", "text" FROM status_messages WHERE run_id = ? ORDER BY id'
        ),
        # What ``llamaherd.write_budget`` charges: a lock row's uri, a call's context and the
        # transcript count twice (a key's index; the callee's queued trigger; the copy being
        # rewritten), a call as two records.
        "run_writes": q(
            "SELECT (SELECT COUNT(*) FROM run_events WHERE run_id = ?) + "
            "(SELECT COUNT(*) FROM status_messages WHERE run_id = ?) + "
            "(SELECT COUNT(*) FROM locks WHERE run_id = ?) + "
            "(SELECT 2 * COUNT(*) FROM calls WHERE caller_run = ?), "
            "(SELECT COALESCE(SUM(LENGTH(data)), 0) FROM run_events WHERE run_id = ?) + "
            '(SELECT COALESCE(SUM(LENGTH("text")), 0) FROM status_messages WHERE run_id = ?) + '
            "(SELECT COALESCE(SUM(2 * LENGTH(uri)), 0) FROM locks WHERE run_id = ?) + "
            f"(SELECT COALESCE(SUM(2 * LENGTH(context) + {CALL_BYTES}), 0) FROM calls "
            "WHERE caller_run = ?) + "
            f"(SELECT COALESCE({TRANSCRIPT_COPIES} * LENGTH(transcript), 0) FROM runs "
            "WHERE id = ?)"
        ),
    }


def run_codecs(
    run: type[pw.Model],
) -> tuple[list[tuple[int, Callable[[Any], Any]]], list[str], dict[str, Callable[[Any], Any]]]:
    """How run rows are read and written: (index, decoder) of the columns that need decoding
    (JSON and boolean; the rest come back as stored), the JSON columns, and each column's
    encoder."""
    run_fields = [run._meta.fields[name] for name in RUN_COLUMNS]
    reads = [
        (index, field.python_value)
        for index, field in enumerate(run_fields)
        if isinstance(field, JSONText | pw.BooleanField)
    ]
    json_columns = [field.name for field in run_fields if isinstance(field, JSONText)]
    return reads, json_columns, {field.name: field.db_value for field in run_fields}


@functools.lru_cache(maxsize=1024)
def _state_data(before: str | None, state: str, reason: str | None, exit_code: int | None) -> str:
    """The JSON of a ``state`` run event (cached: most transitions repeat a few reasons)."""
    data: dict[str, Any] = {"from": before, "to": state, "reason": reason}
    if exit_code is not None:
        data["exit_code"] = exit_code
    return dumps(data)


def _new_run_id(agent: str) -> str:
    return f"{agent}-{secrets.token_hex(4)}"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    import statistics  # here: only `al stats` asks

    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


class Runs(Connection):
    """Runs and what hangs off them; the queue (``Queue``) builds on this to create runs."""

    _run_reads: list[tuple[int, Callable[[Any], Any]]]
    _run_json: list[str]
    _run_writes: dict[str, Callable[[Any], Any]]

    @staticmethod
    def _blank_run(
        agent: str, kind: str, host: str | None, now: float, trigger: dict[str, Any]
    ) -> RunRow:
        return RunRow(
            id=_new_run_id(agent), agent=agent, state="running", trigger_kind=kind, item_id=None,
            host=host, created_at=now, started_at=now, finished_at=None, exit_code=None,
            reason=None, status=None, return_value=None, call_depth=0, caller_run=None,
            call_id=None, rerun_count=0, rerun_requested=False, sandbox=None, transcript=None,
            wait_filter=None, wait_deadline=None, deadline=None, input_tokens=0, output_tokens=0,
            token_hash=None, trigger=trigger, flow_key=None,
        )  # fmt: skip

    def _insert_run(self, run: RunRow, reason: str) -> None:
        """Insert ``run`` and its first state event; should its random id be taken already,
        it draws another."""
        values = dict(zip(RUN_COLUMNS, _run_values(run), strict=True))
        for name in self._run_json:
            if values[name] is not None:
                values[name] = dumps(values[name])
        while self._insert("runs", values, "ON CONFLICT DO NOTHING").rowcount == 0:
            run.id = values["id"] = _new_run_id(run.agent)
        event = _state_data(None, "running", reason, None)
        self._exec(self._sql.event, (run.id, run.created_at, "state", event))

    def _run_row(self, row: tuple) -> RunRow:
        """A RunRow from a row of ``RUN_COLUMNS`` (JSON and boolean columns decoded)."""
        values = list(row)
        for index, read in self._run_reads:
            values[index] = read(values[index])
        return RunRow(*values)

    def _run_rows(self, sql: str, params: tuple | list = ()) -> list[RunRow]:
        return [self._run_row(row) for row in self._exec(sql, params).fetchall()]

    def _fetch_run(self, run_id: str, lock: bool = False) -> RunRow | None:
        """One run by id; ``lock``: FOR UPDATE on PostgreSQL."""
        row = self._exec(self._sql.lock_run if lock else self._sql.get_run, (run_id,)).fetchone()
        return None if row is None else self._run_row(row)

    def _update_run(self, run_id: str, changes: dict[str, Any]) -> None:
        names = tuple(changes)
        sql = self._statement(
            ("update_run", names), lambda: f"UPDATE runs SET {assignments(names)} WHERE id = ?"
        )
        writes = self._run_writes
        self._exec(sql, [*(writes[name](changes[name]) for name in names), run_id])

    # ------------------------------------------------------------ runs
    @guarded
    @grouped
    def create_run(self, agent: str, trigger_kind: str, **fields: Any) -> RunRow:
        """A run in ``running`` not from the queue (foreground ``al run``). ``fields`` are run
        columns (host, trigger, call_id, ...); ``trigger`` defaults to the kind with an empty
        payload."""
        unknown = set(fields) - _PLAIN_RUN_COLUMNS
        if unknown:
            raise TypeError(f"create_run: not run columns: {', '.join(sorted(unknown))}")
        trigger = {"kind": trigger_kind, "payload": {}, "prompt": "", "source": None}
        with self._write():
            now = self._clock()
            run = self._blank_run(agent, trigger_kind, None, now, trigger)
            for name, value in fields.items():
                setattr(run, name, value)
            self._insert_run(run, "started in the foreground")
            if run.call_id is not None:
                self._exec(self._sql.call_run, (run.id, run.call_id))
            return run

    @guarded
    def get_run(self, run_id: str) -> RunRow | None:
        return self._fetch_run(run_id)

    @guarded
    def find_run(self, prefix: str) -> RunRow | None:
        """A run by full id or unique prefix (None when unknown or ambiguous)."""
        run = self._fetch_run(prefix)
        if run is None and prefix:
            found = self._run_rows(self._sql.runs_prefix, (len(prefix), prefix))
            run = found[0] if len(found) == 1 else None
        return run

    @guarded
    def runs(
        self, agent: str | None = None, states: tuple[str, ...] | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Runs, newest first."""
        where = ["1 = 1"]
        params: list[Any] = []
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if states is not None:
            where.append(f"state IN ({marks(states) or 'NULL'})")
            params.extend(states)

        def build() -> str:
            return (
                f"SELECT {columns(RUN_COLUMNS)} FROM runs WHERE {' AND '.join(where)} "
                "ORDER BY created_at DESC, id DESC LIMIT ?"
            )

        key = ("runs", agent is None, None if states is None else len(states))
        return self._run_rows(self._statement(key, build), [*params, limit])

    @guarded
    def last_finished(
        self, agents: list[str]
    ) -> dict[str, tuple[str, str, int | None, float, float | None]]:
        """Each agent's latest run in a final state, in one query (an index seek per agent):
        agent -> (run id, state, exit code, finished at, started at); agents without one are
        absent."""
        if not agents:
            return {}
        final = ", ".join(f"'{state}'" for state in FINAL_STATES)

        def build() -> str:
            values = ", ".join("(?)" for _ in agents)
            return (
                f"WITH a(agent) AS (VALUES {values}) "
                "SELECT r.agent, r.id, r.state, r.exit_code, r.finished_at, r.started_at "
                "FROM a JOIN runs r "
                "ON r.id = (SELECT x.id FROM runs x WHERE x.agent = a.agent "
                f"AND x.state IN ({final}) ORDER BY x.created_at DESC, x.id DESC LIMIT 1)"
            )

        sql = self._statement(("last_finished", len(agents)), build)
        return {row[0]: tuple(row[1:]) for row in self._exec(sql, agents).fetchall()}

    @guarded
    @grouped
    def transition(
        self, run_id: str, state: str, reason: str | None = None, exit_code: int | None = None
    ) -> RunRow:
        """Move a run to ``state`` if TRANSITIONS allows it (else InvalidTransition), record a
        ``state`` event with time and reason. Entering a final state releases its locks, marks
        its work item done and settles its call record (done with return value, or error).
        ``exit_code`` defaults to EXIT_CODES[state] for a final state."""
        with self._write():
            run = self._locked_run(run_id)
            self._apply(run, state, reason, exit_code, self._clock())
            return run

    def _locked_run(self, run_id: str) -> RunRow:
        run = self._fetch_run(run_id, lock=True)
        if run is None:
            raise StoreError(f"no run {run_id!r} in database {self._where}")
        return run

    def _apply(
        self,
        run: RunRow,
        state: str,
        reason: str | None,
        exit_code: int | None,
        now: float,
        **extra: Any,
    ) -> None:
        """The one state change: checked against TRANSITIONS, recorded, cleaned up if final."""
        if state not in TRANSITIONS.get(run.state, ()):
            raise InvalidTransition(
                f"run {run.id} cannot go from {run.state} to {state}"
                f" (allowed: {', '.join(TRANSITIONS.get(run.state, ())) or 'none, it has ended'})"
            )
        before = run.state
        changes: dict[str, Any] = {"state": state, **extra}
        if state in FINAL_STATES:  # the run's reason is why it ended; others are in its events
            changes["reason"] = reason
            changes["finished_at"] = now
            changes["exit_code"] = EXIT_CODES[state] if exit_code is None else exit_code
        elif exit_code is not None:
            changes["exit_code"] = exit_code
        for name, value in changes.items():
            setattr(run, name, value)
        self._update_run(run.id, changes)
        data = _state_data(before, state, reason, changes.get("exit_code"))
        self._exec(self._sql.event, (run.id, now, "state", data))
        if state in FINAL_STATES:
            self._finish(run, now)

    def _finish(self, run: RunRow, now: float) -> None:
        """Release the run's locks, retire its item (and pending resumes), settle its call."""
        sql = self._sql
        self._exec(sql.drop_locks, (run.id,))
        self._exec(sql.drop_waits, (run.id,))
        self._exec(sql.end_items, (run.item_id, run.id))
        if run.call_id is None:
            return
        if run.state == "done":
            settle = ("done", dumps(run.return_value), None)
        else:
            settle = ("error", None, f"{run.state}: {run.reason or 'no reason given'}")
        # Only while this run owns the call: a retry enqueued for it has taken it back.
        self._exec(sql.settle_call, (*settle, now, run.call_id, run.id))

    @guarded
    @grouped
    def update_run(self, run_id: str, **fields: Any) -> None:
        """Set plain columns: sandbox, deadline, host, status, rerun_requested, tokens..."""
        unknown = set(fields) - _PLAIN_RUN_COLUMNS
        if unknown:
            raise TypeError(f"update_run: cannot set {', '.join(sorted(unknown))}")
        if not fields:
            return
        with self._write():
            self._update_run(run_id, fields)

    @guarded
    def checkpoint(self, run_id: str, transcript: list[dict[str, Any]]) -> None:
        """Store the run's transcript (after every turn)."""
        self.update_run(run_id, transcript=transcript)

    @guarded
    @grouped
    def set_status(self, run_id: str, text: str) -> None:
        """Record a status message (kept as history) and make it the run's current status."""
        with self._write():
            self._exec(self._sql.status, (run_id, self._clock(), text))
            self._update_run(run_id, {"status": text})

    @guarded
    @grouped
    def set_return(self, run_id: str, value: Any) -> None:
        """Set the run's return value (its caller gets it when the run ends done)."""
        with self._write():
            self._update_run(run_id, {"return_value": value})
            self._exec(self._sql.event, (run_id, self._clock(), "return", dumps({"value": value})))

    @guarded
    @grouped
    def add_event(self, run_id: str, type: str, data: dict[str, Any] | None = None) -> None:
        """Append a run event (also used for structured log lines: model_call, tool_call...)."""
        with self._write():
            self._exec(self._sql.event, (run_id, self._clock(), type, dumps(data or {})))

    @guarded
    def events(self, run_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        """Run events with id > after_id, oldest first: {id, at, type, data}."""
        sql = self._sql.events
        rows = self._exec(sql, (run_id, after_id)).fetchall()
        return [
            {"id": id, "at": at, "type": type, "data": loads(data) if data else {}}
            for id, at, type, data in rows
        ]

    @guarded
    def status_messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's status history, oldest first: {id, at, text}."""
        rows = self._exec(self._sql.status_messages, (run_id,)).fetchall()
        return [{"id": id, "at": at, "text": text} for id, at, text in rows]

    @guarded
    def run_writes(self, run_id: str) -> tuple[int, int]:
        """What the store holds of the run as its write budget counts it
        (``llamaherd.write_budget``): records (events, status messages, lock rows, calls) and
        characters (theirs and its transcript's)."""
        records, size = self._exec(self._sql.run_writes, (run_id,) * 9).fetchone()
        return int(records), int(size)

    @guarded
    def active_count(self, agent: str | None = None) -> int:
        """Runs in ``running`` (the ones that count against scale; waiting runs do not)."""
        if agent is None:
            return sum(count for _, count in self._exec(self._sql.running).fetchall())
        return self._value(self._sql.running_one, (agent,))

    # ------------------------------------------------------------ waits
    @guarded
    @grouped
    def set_waiting(self, run_id: str, wait_filter: dict[str, Any], deadline: float) -> None:
        """Transition running -> waiting with the filter and deadline stored (and the previous
        resume's ``trigger["resume_payload"]`` dropped: it is spent)."""
        with self._write():
            run = self._locked_run(run_id)
            trigger = {k: v for k, v in run.trigger.items() if k != "resume_payload"}
            self._apply(
                run, "waiting", "wait_for_trigger", None, self._clock(),
                wait_filter=wait_filter, wait_deadline=deadline, trigger=trigger,
            )  # fmt: skip

    @guarded
    def waiting_runs(self) -> list[RunRow]:
        """Every run in ``waiting``, oldest first."""
        return self._run_rows(self._sql.waiting)

    @guarded
    def wait_filters(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(run id, agent, filter) of every waiting run, oldest first: what matching an event
        needs, without loading transcripts (emit calls this for every trigger)."""
        rows = self._exec(self._sql.wait_filters).fetchall()
        return [(run_id, agent, loads(raw) if raw else None) for run_id, agent, raw in rows]

    @guarded
    def expired_waits(self, now: float) -> list[RunRow]:
        """Waiting runs whose wait deadline is at or before ``now``."""
        return self._run_rows(self._sql.expired, (now,))

    @guarded
    def next_wait_deadline(self) -> float | None:
        """The earliest wait deadline of a waiting run (when the next one expires), or None."""
        return self._value(self._sql.next_deadline)

    # ------------------------------------------------------------ history
    @guarded
    def stats(self, agent: str | None = None, since: float | None = None) -> dict[str, Any]:
        """Run history: {runs, states, exit_codes, durations {p50, p95, max} (seconds, finished
        runs), tokens {input, output}, agents {name: the same per agent}, calls [{caller,
        target, count}] (the agent-call graph)}."""
        m = self._m
        query = m.Run.select(
            m.Run.agent, m.Run.state, m.Run.exit_code, m.Run.started_at, m.Run.finished_at,
            m.Run.input_tokens, m.Run.output_tokens,
        )  # fmt: skip
        calls = (
            m.Call.select(m.Run.agent, m.Call.target, pw.fn.COUNT(m.Call.id))
            .join(m.Run, on=(m.Call.caller_run == m.Run.id))
            .group_by(m.Run.agent, m.Call.target)
        )
        if agent is not None:
            query = query.where(m.Run.agent == agent)
            calls = calls.where((m.Run.agent == agent) | (m.Call.target == agent))
        if since is not None:
            query = query.where(m.Run.created_at >= since)
            calls = calls.where(m.Call.created_at >= since)
        rows = list(query.namedtuples())
        costs = self._costs(agent, since)
        per_agent = {
            name: _summary([r for r in rows if r.agent == name], costs.get(name, []))
            for name in sorted({r.agent for r in rows})
        }
        return {
            **_summary(rows, [c for agent_costs in costs.values() for c in agent_costs]),
            "since": since,
            "agents": per_agent,
            "calls": [{"caller": c, "target": t, "count": n} for c, t, n in calls.tuples()],
        }

    def _costs(self, agent: str | None, since: float | None) -> dict[str, list[float | None]]:
        """The cost of every model call of the runs ``stats`` counts, per agent (None where
        the price was unknown), from the runs' ``model_call`` events."""
        m = self._m
        query = (
            m.RunEvent.select(m.Run.agent, m.RunEvent.data)
            .join(m.Run, on=(m.RunEvent.run_id == m.Run.id))
            .where(m.RunEvent.type == "model_call")
        )
        if agent is not None:
            query = query.where(m.Run.agent == agent)
        if since is not None:
            query = query.where(m.Run.created_at >= since)
        costs: dict[str, list[float | None]] = {}
        for name, data in query.tuples():
            cost = data.get("cost_usd") if isinstance(data, dict) else None
            costs.setdefault(name, []).append(cost if isinstance(cost, int | float) else None)
        return costs


def _summary(rows: list[Any], costs: list[float | None]) -> dict[str, Any]:
    durations = sorted(
        r.finished_at - r.started_at for r in rows if r.finished_at and r.started_at is not None
    )
    exit_codes = Counter(str(r.exit_code) for r in rows if r.exit_code is not None)
    return {
        "runs": len(rows),
        "states": dict(Counter(r.state for r in rows)),
        "exit_codes": dict(exit_codes),
        "durations": {
            "p50": _percentile(durations, 0.50),
            "p95": _percentile(durations, 0.95),
            "max": durations[-1] if durations else None,
        },
        "tokens": {
            "input": sum(r.input_tokens for r in rows),
            "output": sum(r.output_tokens for r in rows),
        },
        # USD of the model calls whose price was known; how many calls had none.
        "cost": {
            "usd": round(sum(c for c in costs if c is not None), 6),
            "unpriced_calls": sum(1 for c in costs if c is None),
        },
    }

"""The work queue: enqueue (bounded, deduplicated, coalesced), claim (FIFO per agent, fair
across agents, ``scale`` held across any number of schedulers), resume items for waiting runs.

On SQLite a claim runs under ``BEGIN IMMEDIATE`` (one writer at a time); on PostgreSQL the claims
of one agent are serialised by a transaction-level advisory lock, so ``scale`` holds across
hosts, while items are taken with ``FOR UPDATE SKIP LOCKED``.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from llamaherd.inbound import loads
from llamaherd.store.connection import PG_CLAIM, PG_GLOBAL, PG_QUEUE, columns, grouped, guarded
from llamaherd.store.runs import RunRow, Runs
from llamaherd.store.schema import dumps

log = logging.getLogger(__name__)

# Work item states: queued -> claimed -> done, or queued -> dropped (queue full).
ITEM_STATES = ("queued", "claimed", "done", "dropped")
# Drops of one agent's items less than this many seconds apart are one burst: logged once.
DROP_BURST_GAP = 10.0
# claim(): with up to this many agents having room, each queue head is found by an index seek.
_SEEK_AGENTS = 16
# Which queued items the claiming host (the one parameter) may take: a resume item is left to
# the live host that parked its run, where its sandbox is (a host that died has lost its row).
_RESUME_HERE = (
    "NOT (kind = 'resume' AND run_id IN (SELECT runs.id FROM runs JOIN hosts "
    "ON hosts.name = runs.host WHERE runs.state = 'waiting' AND runs.host <> ?))"
)


@dataclass
class WorkItemRow:
    id: int
    agent: str
    kind: str  # scheduled | manual | webhook | agent | resume
    payload: dict[str, Any]
    prompt: str
    source: str | None
    run_id: str | None  # for kind == "resume": the waiting run to continue
    call_id: int | None
    recovery: dict[str, Any] | None  # set when requeued after a crash: the interrupted run's times
    rerun_count: int
    created_at: float
    priority: float | None = None
    not_before: float | None = None
    flow: dict[str, Any] | None = None  # flow control: per-control keys, what it absorbed


_ITEM_COLUMNS = tuple(f.name for f in fields(WorkItemRow))


class Claims(list):  # list[tuple[WorkItemRow, RunRow]]
    """The claims of one pass, and ``due``: the earliest moment (store clock) at which flow
    control lets an item it held in this pass start (a debounce window closing, a throttle, a
    batch timeout), or None when it held none for a time."""

    due: float | None = None

    def hold_until(self, when: float | None) -> None:
        """Note an item held until ``when`` (None: until something else changes)."""
        if when is not None and (self.due is None or when < self.due):
            self.due = when


def statements(q: Callable[[str], str], pg: bool) -> dict[str, str]:
    """The queue's prepared statements (``Connection._sql``)."""
    item_cols = columns(_ITEM_COLUMNS)
    lock = " FOR UPDATE SKIP LOCKED" if pg else ""
    queued = "FROM work_items WHERE state = 'queued' AND agent = ?"
    return {
        # Each agent's oldest queued item: one pass over the queued-items partial index,
        # so bounded by the queues' limits.
        "heads": q(
            f"SELECT {item_cols} FROM work_items WHERE id IN (SELECT MIN(id) FROM work_items "
            f"WHERE state = 'queued' AND {_RESUME_HERE} GROUP BY agent)"
        ),
        "take": q(f"SELECT {item_cols} {queued} AND {_RESUME_HERE} ORDER BY id LIMIT 1{lock}"),
        # SKIP LOCKED: a resume item being claimed right now is left to that claim, which
        # then finds the run ended (locking it the other way round could deadlock).
        "end_items": q(
            "UPDATE work_items SET state = 'done' WHERE id IN (SELECT id FROM work_items "
            f"WHERE id = ? OR (run_id = ? AND state = 'queued'){lock})"
        ),
        "item_state": q("UPDATE work_items SET state = ? WHERE id = ?"),
        "any_queued": q("SELECT 1 FROM work_items WHERE state = 'queued' LIMIT 1"),
        "dedupe": q("SELECT 1 FROM work_items WHERE dedupe_key = ?"),
        "coalesce": q(f"SELECT 1 {queued} AND kind = ? LIMIT 1"),
        # Counted on the queued-items index alone; resume items (never counted against the
        # limit, and rare) are subtracted only when the queue looks full.
        "depth_all": q(f"SELECT COUNT(*) {queued}"),
        "depth": q(f"SELECT COUNT(*) {queued} AND kind <> 'resume'"),
        "oldest": q(
            f"SELECT id, kind, created_at, call_id {queued} AND kind <> 'resume' "
            "ORDER BY id LIMIT ?"
        ),
        "drop_events": q("DELETE FROM run_events WHERE run_id = ?"),
        "drop_run": q("DELETE FROM runs WHERE id = ?"),
        "pending_resume": q(
            "SELECT 1 FROM work_items WHERE run_id = ? AND kind = 'resume' "
            "AND state = 'queued' LIMIT 1"
        ),
    }


# (database, agent) -> [last drop (monotonic clock), drops in its burst]
_bursts: dict[tuple[str, str], list[float]] = {}


def _log_drops(where: str, agent: str, limit: int, count: int) -> None:
    """One warning per burst of drops (a flood into a full queue would otherwise log a line per
    delivery); each drop is still an agent event. The next burst's line counts the last one."""
    now = time.monotonic()
    burst = _bursts.get((where, agent))
    if burst is not None and now - burst[0] < DROP_BURST_GAP:
        burst[0], burst[1] = now, burst[1] + count
        return
    before = f" ({int(burst[1])} dropped in its previous burst)" if burst else ""
    _bursts[where, agent] = [now, count]
    log.warning(
        "queue of agent %s is full (%d items): dropping its oldest items while it stays full, "
        "each recorded as a `dropped` agent event%s",
        agent, limit, before,
    )  # fmt: skip


class Queue(Runs):
    """Work items of every agent; claiming one creates (or resumes) its run."""

    @guarded
    @grouped
    def enqueue(
        self,
        agent: str,
        kind: str,
        payload: dict[str, Any],
        prompt: str = "",
        *,
        limit: int = 100,
        source: str | None = None,
        dedupe_key: str | None = None,
        call_id: int | None = None,
        run_id: str | None = None,
        recovery: dict[str, Any] | None = None,
        rerun_count: int = 0,
        coalesce: bool = False,
        flow: Any = None,
    ) -> int | None:
        """Commit a work item; return its id, or None when ``dedupe_key`` was seen before or
        ``coalesce`` found an equivalent pending item (same agent and kind, still queued).
        When the agent's queue already holds ``limit`` items the oldest are dropped, each with a
        ``dropped`` agent event and a log line. ``resume`` items are neither counted nor
        dropped. An item carrying ``call_id`` (a retried call) puts that call back to pending."""
        sql = self._sql
        with self._write():
            self._pg_lock(PG_QUEUE, agent)
            if dedupe_key is not None and self._exec(sql.dedupe, (dedupe_key,)).fetchone():
                return None
            if coalesce and self._exec(sql.coalesce, (agent, kind)).fetchone():
                return None
            if kind != "resume":
                self._drop_overflow(agent, max(limit, 1))
            if call_id is not None:
                self._exec(sql.call_run, (None, call_id))
            item = {
                "agent": agent, "kind": kind, "payload": dumps(payload), "prompt": prompt or "",
                "source": source, "run_id": run_id, "call_id": call_id,
                "recovery": None if recovery is None else dumps(recovery),
                "rerun_count": rerun_count, "created_at": self._clock(), "dedupe_key": dedupe_key,
                "state": "queued",
            }  # fmt: skip
            if flow is not None:
                return self._flow_enqueue(item, flow)
            # DO NOTHING: a dedupe key a concurrent host committed since the check gives no row.
            inserted = self._insert("work_items", item, "ON CONFLICT DO NOTHING RETURNING id")
            row = inserted.fetchone()
            return None if row is None else row[0]

    @guarded
    @grouped
    def enqueue_many(self, items: Iterable[dict[str, Any]]) -> list[int | None]:
        """``enqueue`` each of ``items`` (each the keyword arguments of one ``enqueue`` call),
        all in one write transaction: a producer with several items at hand pays one commit and
        one hand-over to the writer thread for them all. The ids, in order (None where
        ``enqueue`` would give None)."""
        with self._write():
            return [self.enqueue(**item) for item in items]

    def _drop_overflow(self, agent: str, limit: int) -> None:
        if self._value(self._sql.depth_all, (agent,)) < limit:
            return
        depth = self._value(self._sql.depth, (agent,))
        if depth < limit:
            return
        now = self._clock()
        victims = self._exec(self._sql.oldest, (agent, depth - limit + 1)).fetchall()
        for item_id, kind, created_at, call_id in victims:
            self._exec(self._sql.item_state, ("dropped", item_id))
            if call_id is not None:  # never served: its caller must stop waiting
                reason = f"the queue of {agent} was full: the call was dropped"
                self._exec(self._sql.drop_call, (reason, now, call_id))
            data = {"item_id": item_id, "kind": kind, "created_at": created_at, "limit": limit}
            self._exec(self._sql.agent_event, (agent, now, "dropped", dumps(data)))
        _log_drops(self._where, agent, limit, len(victims))

    def claim(
        self,
        scales: dict[str, int],
        global_scale: int | None,
        host: str,
        paused: set[str] | None = None,
        flows: dict[str, Any] | None = None,
    ) -> tuple[WorkItemRow, RunRow] | None:
        """Atomically take the oldest claimable item (FIFO per agent; agents fairly) whose agent
        has fewer than ``scales[agent]`` runs in state ``running`` and with fewer than
        ``global_scale`` running overall. A normal item creates a Run in ``running``; a
        ``resume`` item moves its waiting run back to ``running``, with the resume payload in
        ``run.trigger["resume_payload"]`` (and in the returned item's ``payload``). Returns None
        when nothing can be claimed.

        Fairness: among agents with room, the one with the fewest running runs goes first, ties
        to the oldest item. Agents missing from ``scales``, at 0, or in ``paused`` are skipped.
        ``flows``: the ``llamaherd.flow.FlowPolicy`` of agents with a ``[flow]``; their item is
        the one flow control lets start (``FlowStore._flow_head``), not simply the oldest."""
        claimed = self.claim_many(scales, global_scale, host, paused, flows, limit=1)
        return claimed[0] if claimed else None

    @guarded
    @grouped
    def claim_many(
        self,
        scales: dict[str, int],
        global_scale: int | None,
        host: str,
        paused: set[str] | None = None,
        flows: dict[str, Any] | None = None,
        *,
        limit: int,
    ) -> Claims:
        """Up to ``limit`` claims in one write transaction, each the one ``claim`` would take
        next (same order, fairness and scale): when several slots are free, one commit starts
        them all. On PostgreSQL each claim stays its own transaction: one holding several
        agents' claim locks could deadlock with another scheduler's. ``Claims.due``: when flow
        control next lets an item it held start."""
        if self._pg and limit > 1:
            claimed = Claims()
            while len(claimed) < limit:
                one = self.claim_many(scales, global_scale, host, paused, flows, limit=1)
                claimed.hold_until(one.due)
                if not one:
                    break
                claimed.extend(one)
            return claimed
        skip = paused or set()
        wanted = {
            agent: scale for agent, scale in scales.items() if scale > 0 and agent not in skip
        }
        if not wanted or (global_scale is not None and global_scale <= 0):
            return Claims()  # decided without a transaction: a paused scheduler takes no lock
        with self._write():
            if global_scale is not None:
                self._pg_lock(PG_GLOBAL)
            running = dict(self._exec(self._sql.running).fetchall())
            return self._claim_heads(wanted, global_scale, host, running, limit, flows or {})

    def _claim_heads(
        self,
        wanted: dict[str, int],
        global_scale: int | None,
        host: str,
        running: dict[str, int],
        limit: int,
        flows: dict[str, Any],
    ) -> Claims:
        """Claim from the queue heads of the agents with room, in fairness order (fewest
        running first, then oldest item), until ``limit``. The heads are read once: after a
        claim only that agent's next head is (one index seek), as nothing else changes under
        this transaction's write lock. An agent under flow control has its item picked by
        flow control (``_flow_head``) each time, its head only placing it in the order."""
        claimed = Claims()
        room = {agent for agent, scale in wanted.items() if running.get(agent, 0) < scale}
        if not room:
            return claimed
        heap = [(running.get(row[1], 0), row[0], row) for row in self._heads(room, host)]
        heapq.heapify(heap)
        total = sum(running.values())
        tried = False
        while heap and len(claimed) < limit:
            if global_scale is not None and total >= global_scale:
                break
            _, _, head = heapq.heappop(heap)  # (id, agent, ...) as in _ITEM_COLUMNS
            agent = head[1]
            policy = flows.get(agent)
            # Only the first agent's lock is waited for: this transaction holds none yet.
            if policy is not None and policy.claim_time:
                item = self._flow_head(agent, policy, wanted[agent], host, not tried, claimed)
            else:
                item = self._lock_head(head, wanted[agent], host, wait=not tried)
            tried = True
            if item is None:
                continue  # full, flow control holds it, or another scheduler is claiming for it
            got = self._take(item, host, policy)  # None: a stale resume item, retired
            if got is not None:
                claimed.append(got)
                running[agent] = running.get(agent, 0) + 1
                total += 1
            if running.get(agent, 0) < wanted[agent]:
                row = self._exec(self._sql.take, (agent, host)).fetchone()
                if row is not None:
                    heapq.heappush(heap, (running.get(agent, 0), row[0], row))
        return claimed

    @guarded
    @grouped
    def claim_resume(self, run_id: str, host: str) -> tuple[WorkItemRow, RunRow] | None:
        """Claim the queued ``resume`` item of waiting run ``run_id`` now, whatever its agent's
        scale (a suspended run holds its slot): the run goes back to ``running`` on ``host``.
        None when it has no resume item ``host`` may claim."""
        if not self._value(self._sql.pending_resume, (run_id,)):
            return None  # decided without a write lock: the dispatcher asks on every pass
        lock = " FOR UPDATE SKIP LOCKED" if self._pg else ""
        sql = self._statement(
            ("claim_resume",),
            lambda: (
                f"SELECT {columns(_ITEM_COLUMNS)} FROM work_items WHERE run_id = ? "
                f"AND kind = 'resume' AND state = 'queued' AND {_RESUME_HERE} "
                f"ORDER BY id LIMIT 1{lock}"
            ),
        )
        with self._write():
            row = self._exec(sql, (run_id, host)).fetchone()
            return None if row is None else self._take_resume(self._item(row), host, self._clock())

    def _heads(self, room: set[str], host: str) -> list[tuple]:
        """The oldest item ``host`` may claim of each agent in ``room``. Few agents: one index
        seek each, so the cost does not grow with the queue; many: one pass over the queued
        items."""
        if len(room) > _SEEK_AGENTS:
            rows = self._exec(self._sql.heads, (host,)).fetchall()
            return [row for row in rows if row[1] in room]
        agents = sorted(room)

        def build() -> str:
            values = ", ".join("(?)" for _ in agents)
            return (
                f"WITH room(agent) AS (VALUES {values}) SELECT {columns(_ITEM_COLUMNS)} "
                "FROM work_items WHERE id IN (SELECT (SELECT MIN(w.id) FROM work_items w "
                f"WHERE w.state = 'queued' AND w.agent = room.agent AND {_RESUME_HERE}) FROM room)"
            )

        statement = self._statement(("heads", len(agents)), build)
        return self._exec(statement, [*agents, host]).fetchall()

    def _lock_head(self, head: tuple, scale: int, host: str, wait: bool) -> WorkItemRow | None:
        """The item to claim. SQLite: the head itself (BEGIN IMMEDIATE already excludes every
        other writer). PostgreSQL: take the agent's claim lock, recount its running runs, and
        lock its oldest item no other scheduler holds (SKIP LOCKED). Without ``wait`` (this
        transaction holds another agent's claim lock already), an agent another scheduler is
        claiming for is passed over: waiting there could deadlock with a scheduler that took the
        two locks the other way round."""
        if not self._pg:
            return self._item(head)
        agent = head[1]
        if not self._pg_lock(PG_CLAIM, agent, wait=wait):
            return None
        if self._value(self._sql.running_one, (agent,)) >= scale:
            return None
        row = self._exec(self._sql.take, (agent, host)).fetchone()
        return None if row is None else self._item(row)

    def _take(
        self, item: WorkItemRow, host: str, policy: Any = None
    ) -> tuple[WorkItemRow, RunRow] | None:
        now = self._clock()
        if item.kind == "resume":
            return self._take_resume(item, host, now)
        trigger = {
            "kind": item.kind,
            "payload": item.payload,
            "prompt": item.prompt,
            "source": item.source,
            "recovery": item.recovery,
            # When it was queued and claimed: the queue wait, for observers (``run_started``).
            "queued_at": item.created_at,
            "claimed_at": now,
        }
        caller_run, depth = None, 0
        if item.call_id is not None:
            found = self._exec(self._sql.call_of, (item.call_id,)).fetchone()
            caller_run, depth = found if found else (None, 0)
        run = self._blank_run(item.agent, item.kind, host, now, trigger)
        run.item_id, run.call_id, run.rerun_count = item.id, item.call_id, item.rerun_count
        run.caller_run, run.call_depth = caller_run, depth
        if policy is not None:
            self._flow_claimed(item, run, policy, now)
        self._insert_run(run, "claimed")
        self._exec(self._sql.item_state, ("claimed", item.id))
        if item.call_id is not None:
            self._exec(self._sql.call_run, (run.id, item.call_id))
        return item, run

    def _take_resume(
        self, item: WorkItemRow, host: str, now: float
    ) -> tuple[WorkItemRow, RunRow] | None:
        run = self._fetch_run(item.run_id, lock=True) if item.run_id else None
        if run is None or run.state != "waiting":
            self._exec(self._sql.item_state, ("done", item.id))  # its run ended meanwhile
            return None
        trigger = dict(run.trigger or {}, resume_payload=item.payload)
        self._apply(
            run, "running", "resumed", None, now,
            host=host, trigger=trigger, wait_filter=None, wait_deadline=None,
        )  # fmt: skip
        self._exec(self._sql.item_state, ("claimed", item.id))
        return item, run

    @staticmethod
    def _item(row: tuple) -> WorkItemRow:
        item = WorkItemRow(*row)  # the columns are selected in field order (_ITEM_COLUMNS)
        item.payload = loads(item.payload)
        if item.recovery is not None:
            item.recovery = loads(item.recovery)
        if item.flow is not None:
            item.flow = loads(item.flow)
        return item

    @guarded
    def item_state(self, item_id: int) -> str | None:
        """The state of work item ``item_id`` (``ITEM_STATES``), None when there is none."""
        sql = self._statement(("item_state",), lambda: "SELECT state FROM work_items WHERE id = ?")
        row = self._exec(sql, (item_id,)).fetchone()
        return None if row is None else row[0]

    @guarded
    def has_queued(self) -> bool:
        """Whether any item is queued (resume items included), by one index probe."""
        return self._exec(self._sql.any_queued).fetchone() is not None

    @guarded
    def queue_depth(self, agent: str | None = None) -> dict[str, int]:
        """Queued items per agent (agents with none are absent unless asked for by name)."""
        if agent is not None:
            return {agent: self._value(self._sql.depth_all, (agent,))}
        sql = "SELECT agent, COUNT(*) FROM work_items WHERE state = 'queued' GROUP BY agent"
        return dict(self._exec(sql).fetchall())

    @guarded
    def clear_queue(
        self,
        agent: str,
        reason: str = "its queued trigger was dropped",
        *,
        keep: set[str] | frozenset[str] = frozenset(),
    ) -> int:
        """Delete queued items of ``agent`` but those of the kinds in ``keep``; return the count.
        An agent call such an item carried will never be served: it is settled as an error
        with ``reason``, so its caller stops waiting."""
        m = self._m
        where = (m.WorkItem.state == "queued") & (m.WorkItem.agent == agent)
        if keep:
            where &= m.WorkItem.kind.not_in(sorted(keep))
        with self._write():
            carried = m.WorkItem.select(m.WorkItem.call_id).where(
                where & m.WorkItem.call_id.is_null(False)
            )
            m.Call.update(state="error", error=reason, finished_at=self._clock()).where(
                m.Call.id.in_(carried) & m.Call.run_id.is_null() & (m.Call.state == "pending")
            ).execute()
            return m.WorkItem.delete().where(where).execute()

    @guarded
    @grouped
    def withdraw(self, item_id: int) -> bool:
        """Delete work item ``item_id`` if it is still queued (``al run`` interrupted before its
        run started); False when it was claimed already or is gone."""
        m = self._m
        where = (m.WorkItem.id == item_id) & (m.WorkItem.state == "queued")
        with self._write():
            return m.WorkItem.delete().where(where).execute() == 1

    @guarded
    @grouped
    def unclaim(self, run_id: str) -> bool:
        """Undo the claim of a run that never started (its runtime had no room for it, see
        ``SandboxBusy``): the run and its events are deleted and its work item is queued again
        in its place (same id, so first in line again). False when the run is no longer
        ``running`` (killed meanwhile: that stands) or did not come from the queue."""
        with self._write():
            run = self._fetch_run(run_id, lock=True)
            if run is None or run.state != "running" or run.item_id is None:
                return False
            self._exec(self._sql.drop_events, (run_id,))
            self._exec(self._sql.drop_run, (run_id,))
            self._exec(self._sql.item_state, ("queued", run.item_id))
            if run.call_id is not None:
                self._exec(self._sql.call_run, (None, run.call_id))
            return True

    @guarded
    @grouped
    def resume_waiting(self, run_id: str, payload: dict[str, Any]) -> bool:
        """Enqueue a ``resume`` item for a waiting run once (False if already resumed or the
        run is not waiting). The dispatcher's claim then moves the run back to running."""
        with self._write():
            run = self._locked_run(run_id)
            if run.state != "waiting" or self._value(self._sql.pending_resume, (run_id,)):
                return False
            self.enqueue(run.agent, "resume", payload, run_id=run_id, source="resume")
            return True

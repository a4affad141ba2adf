"""Flow control and spend in the store: what ``llamaherd.flow`` decides, done durably.

At enqueue (inside the enqueue transaction, under the agent's queue lock on PostgreSQL):
rate limits, singleton ``skip``/``cancel``/``interrupt``, debounce folding. At claim (under the
agent's claim lock): which of an agent's queued items may start now (keys' active runs,
throttles, debounce timers, batches) and in what order (priority, then age). Plus the spend
ledger budgets read, and the messages an ``interrupt`` hands to a run on another scheduler.

Rate state is GCRA (the generic cell rate algorithm): per key, the theoretical arrival time
``tat`` of the next event at the steady rate; an event is allowed while ``tat - now`` stays
within the burst tolerance, and moves ``tat`` on by one interval. One row per key, so a key
costs the same however busy it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llamaherd.store.connection import PG_CLAIM, columns, grouped, guarded
from llamaherd.store.queue import _ITEM_COLUMNS, _RESUME_HERE, Claims, Queue, WorkItemRow
from llamaherd.store.runs import RunRow
from llamaherd.store.schema import dumps

if TYPE_CHECKING:
    from llamaherd.flow import FlowPolicy, Throttle, Ticket

# Wait-filter types of a run parked for a human (ask, respond) or for approval (maxTurns): an
# interrupt does not wake those (llamaherd.session.HUMAN, llamaherd.agents.SUSPENSION).
HUMAN, SUSPENSION = "human", "suspension"
MAX_IDS = 50  # ids of absorbed triggers an item keeps (the count goes on)
NOT_RUN = ("skipped", "dropped", "superseded")  # agent events trigger.<what> of flow control
ACTIVE = "state IN ('running', 'waiting')"


def statements(q: Callable[[str], str], pg: bool) -> dict[str, str]:
    """Flow control's prepared statements (``Connection._sql``)."""
    lock = " FOR UPDATE SKIP LOCKED" if pg else ""
    return {
        # Waits for a claim that holds the key's pending item (a claim pass locks every queued
        # item of its agent): skipping it would start a second window for the key, and one
        # burst would run twice. Once the claim commits, the row is looked at again: claimed,
        # it is not returned, and this trigger starts the next window.
        "fold_target": q(
            "SELECT id, flow FROM work_items WHERE state = 'queued' AND agent = ? "
            "AND flow_key = ? AND kind <> 'resume' ORDER BY id LIMIT 1"
            + (" FOR UPDATE" if pg else "")
        ),
        "fold": q(
            "UPDATE work_items SET kind = ?, payload = ?, prompt = ?, source = ?, flow = ?, "
            "not_before = ? WHERE id = ? AND state = 'queued'"
        ),
        "flow_items": q(
            f"SELECT {columns(_ITEM_COLUMNS)} FROM work_items WHERE state = 'queued' "
            f"AND agent = ? AND {_RESUME_HERE} ORDER BY id{lock}"
        ),
        "keyed_items": q(
            "SELECT id, call_id, flow FROM work_items WHERE state = 'queued' AND agent = ? "
            "AND kind <> 'resume' ORDER BY id"
        ),
        "active_keys": q(
            f"SELECT flow_key, COUNT(*) FROM runs WHERE agent = ? AND {ACTIVE} GROUP BY flow_key"
        ),
        "active_of_key": q(
            f"SELECT id FROM runs WHERE agent = ? AND flow_key = ? AND {ACTIVE} "
            "ORDER BY created_at DESC"
        ),
        "tat": q('SELECT tat FROM flow_limits WHERE agent = ? AND control = ? AND "key" = ?'),
        "tats": q('SELECT "key", tat FROM flow_limits WHERE agent = ? AND control = ?'),
        "set_tat": q(
            'INSERT INTO flow_limits (agent, control, "key", tat) VALUES (?, ?, ?, ?) '
            'ON CONFLICT (agent, control, "key") DO UPDATE SET tat = excluded.tat'
        ),
        "add_message": q(
            "INSERT INTO flow_messages (run_id, host, text, created_at) VALUES (?, ?, ?, ?)"
        ),
        "messages": q("SELECT id, run_id, text FROM flow_messages WHERE host = ? ORDER BY id"),
        "drop_message": q("DELETE FROM flow_messages WHERE id = ?"),
        "spend": q(
            "INSERT INTO spend (agent, day, usd, tokens, unpriced) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (agent, day) DO UPDATE SET usd = spend.usd + excluded.usd, "
            "tokens = spend.tokens + excluded.tokens, "
            "unpriced = spend.unpriced + excluded.unpriced"
        ),
        # The period's spend in (at most) four sums: this agent or another, this day or
        # another; not one row per agent and day (a fan-out to 200 agents read 200 rows for
        # each model call, twice).
        "spend_totals": q(
            "SELECT agent = ?, day = ?, SUM(usd), SUM(tokens), SUM(unpriced) FROM spend "
            "WHERE day >= ? AND day <= ? GROUP BY 1, 2"
        ),
    }


def gcra(tat: float | None, now: float, rate: Throttle) -> float | None:
    """The key's next ``tat`` when an event at ``now`` is allowed, else None."""
    interval = rate.interval
    if tat is not None and tat - now > (rate.burst - 1) * interval + 1e-9:
        return None
    return max(tat if tat is not None else now, now) + interval


# Which of an item's keys ``al stat`` counts it under: the first it has of these.
_SHOWN_KEYS = ("concurrency", "debounce", "throttle", "batch", "rateLimit")


def _keys(item: WorkItemRow) -> dict[str, str]:
    return (item.flow or {}).get("keys") or {}


_CALL = "\0call:"  # the batch key of an agent call: never batched with another trigger


def _batch_key(item: WorkItemRow, policy: FlowPolicy) -> str:
    if policy.batch is None or item.call_id is not None:
        return f"{_CALL}{item.id}"
    return _keys(item).get("batch", "")


def allowed_at(tat: float | None, rate: Throttle) -> float:
    """The earliest moment ``gcra`` allows an event for a key whose ``tat`` this is."""
    return float("-inf") if tat is None else tat - (rate.burst - 1) * rate.interval


def _start_at(
    item: WorkItemRow,
    batched: int,
    policy: FlowPolicy,
    active: dict[str | None, int],
    tats: dict[str, float],
) -> float | None:
    """When flow control lets ``item`` (the first of ``batched`` of its batch) start: a moment
    (past or to come: its debounce window, its key's throttle, its batch's timeout), or None
    while its key has as many active runs as allowed (a run's end changes that, not time)."""
    keys = _keys(item)
    if policy.concurrency and active.get(keys.get("concurrency", ""), 0) >= policy.concurrency:
        return None
    at = item.not_before if item.not_before is not None else float("-inf")
    if policy.throttle:
        at = max(at, allowed_at(tats.get(keys.get("throttle", "")), policy.throttle))
    if policy.batch is not None and item.call_id is None:
        size, timeout = policy.batch
        if batched < size:
            at = max(at, item.created_at + timeout)
    return at


class FlowStore(Queue):
    """Flow control's side of the queue and the spend ledger (see the module docstring)."""

    # ------------------------------------------------------------ at enqueue
    def _flow_enqueue(self, item: dict[str, Any], ticket: Ticket) -> int | None:
        """Insert ``item`` (the enqueue's row) as ``ticket``'s controls say, or fold, drop,
        skip it (its outcome in ``ticket``). Inside the enqueue's transaction."""
        policy, agent, now = ticket.policy, item["agent"], item["created_at"]
        flow: dict[str, Any] = {"keys": ticket.keys}
        item["priority"] = ticket.priority
        if ticket.admit:
            if policy.rate_limit is not None and not self._take_rate(
                agent, "rateLimit", ticket.key("rateLimit"), policy.rate_limit, now
            ):
                self._refuse(ticket, agent, "dropped", "rateLimit", policy.rate_limit)
                return None
            if policy.singleton in ("skip", "cancel", "interrupt") and self._singleton(
                item, ticket
            ):
                return None
            if policy.debounce is not None:
                folded = self._fold(item, ticket, flow)
                if folded is not None:
                    return folded
        if policy.debounce is not None and ticket.admit:
            period, _ = policy.debounce
            item["flow_key"] = ticket.key("debounce")
            item["not_before"] = now + period
            flow.update(count=1, ids=[ticket.label], first_at=now)
        item["flow"] = dumps(flow)
        inserted = self._insert("work_items", item, "ON CONFLICT DO NOTHING RETURNING id")
        row = inserted.fetchone()
        return None if row is None else row[0]

    def _take_rate(self, agent: str, control: str, key: str, rate: Throttle, now: float) -> bool:
        """Count one event against ``key``'s rate; False (nothing counted) when over it."""
        tat = gcra(self._value(self._sql.tat, (agent, control, key)), now, rate)
        if tat is None:
            return False
        self._exec(self._sql.set_tat, (agent, control, key, tat))
        return True

    def _refuse(self, ticket: Ticket, agent: str, outcome: str, control: str, why: Any) -> bool:
        """Record a trigger flow control did not queue (``trigger.<outcome>`` agent event)."""
        if control == "rateLimit":
            reason = f"rate limit: {why.limit} per {why.period:g} s for key {ticket.key(control)!r}"
        else:
            reason = str(why)
        ticket.outcome, ticket.reason = outcome, reason
        key = ticket.key("concurrency" if control == "singleton" else control)
        data = {"trigger": ticket.label, "control": control, "key": key, "reason": reason}  # fmt: skip
        self._exec(self._sql.agent_event, (agent, self._clock(), f"trigger.{outcome}", dumps(data)))
        return True

    def _singleton(self, item: dict[str, Any], ticket: Ticket) -> bool:
        """``skip``: refuse a trigger for a busy key; ``cancel``: end the key's active runs
        and queued items; ``interrupt``: hand the trigger to the key's active run. True when
        that took care of the trigger (False: queue it)."""
        agent, key, mode = item["agent"], ticket.key("concurrency"), ticket.policy.singleton
        active = [row[0] for row in self._exec(self._sql.active_of_key, (agent, key)).fetchall()]
        queued = [
            (item_id, call_id)
            for item_id, call_id, flow in self._exec(self._sql.keyed_items, (agent,)).fetchall()
            if (json.loads(flow) if flow else {}).get("keys", {}).get("concurrency", "") == key
        ]
        if mode == "skip":
            if active or queued:
                busy = f"run {active[0]}" if active else "a queued trigger"
                why = f"singleton skip: key {key!r} is busy ({busy})"
                return self._refuse(ticket, agent, "skipped", "singleton", why)
            return False
        if mode == "interrupt" and active:
            run = self._fetch_run(active[0], lock=True)
            if run is not None and self._interrupt(run, item, ticket):
                return True
        now = item["created_at"]
        reason = f"superseded by a newer trigger for key {key!r} ({ticket.label})"
        for run_id in active if mode == "cancel" else []:
            run = self._fetch_run(run_id, lock=True)
            if run is not None and run.state in ("running", "waiting"):
                self._apply(run, "killed", reason, None, now)
                ticket.superseded.append(run_id)
        for item_id, call_id in queued:
            if call_id is not None:
                continue  # a call's caller waits for its own result
            self._exec(self._sql.item_state, ("dropped", item_id))
            data = {"item_id": item_id, "control": "singleton", "key": key, "reason": reason}
            self._exec(self._sql.agent_event, (agent, now, "trigger.superseded", dumps(data)))
        if ticket.superseded or queued:
            ticket.outcome = "superseded"
        return False

    def _interrupt(self, run: RunRow, item: dict[str, Any], ticket: Ticket) -> bool:
        """The key's active ``run`` takes the trigger: its stored trigger becomes the new one
        (a restart's requeue runs the newest), and the message reaches it at its next turn (a
        run waiting for a trigger is woken with it). False for a run waiting for a human or
        for approval: the trigger is queued behind it instead."""
        wait_type = (run.wait_filter or {}).get("type") if run.state == "waiting" else None
        if wait_type in (HUMAN, SUSPENSION):
            return False
        trigger = dict(run.trigger or {})
        count = int((trigger.get("flow") or {}).get("interrupts", 0)) + 1
        trigger.update(
            kind=item["kind"], payload=json.loads(item["payload"]), prompt=item["prompt"],
            source=item["source"], flow={**(trigger.get("flow") or {}), "interrupts": count},
        )  # fmt: skip
        self._update_run(run.id, {"trigger": trigger})
        message = ticket.message or ticket.label
        if run.state == "waiting":
            resume = {
                "result": "the wait ended early: a newer trigger for this run's key arrived "
                "(next message)",
                "is_error": True,
                "message": message,
            }
            self.resume_waiting(run.id, resume)
        else:
            self._exec(self._sql.add_message, (run.id, run.host, message, self._clock()))
        ticket.outcome, ticket.interrupted = f"interrupted {run.id}", (run.id, run.host)
        data = {"trigger": ticket.label, "key": ticket.key("concurrency")}
        self._exec(self._sql.event, (run.id, self._clock(), "flow.interrupt", dumps(data)))
        return True

    def _fold(self, item: dict[str, Any], ticket: Ticket, flow: dict[str, Any]) -> int | None:
        """Debounce: the key's pending item takes this trigger's payload and fires a quiet
        period from now (at the latest ``timeout`` after its first); its id, or None when the
        key has none pending."""
        agent, key = item["agent"], ticket.key("debounce")
        found = self._exec(self._sql.fold_target, (agent, key)).fetchone()
        if found is None:
            return None
        item_id, raw = found
        held = json.loads(raw) if raw else {}
        period, timeout = ticket.policy.debounce
        first = float(held.get("first_at", item["created_at"]))
        fire = item["created_at"] + period
        if timeout is not None:
            fire = min(fire, first + timeout)
        ids = [*held.get("ids", []), ticket.label][-MAX_IDS:]
        flow.update(count=int(held.get("count", 1)) + 1, ids=ids, first_at=first)
        values = (item["kind"], item["payload"], item["prompt"], item["source"], dumps(flow), fire)
        if self._exec(self._sql.fold, (*values, item_id)).rowcount != 1:
            return None  # claimed meanwhile: this trigger starts a new window
        ticket.outcome = "debounced"
        return item_id

    # ------------------------------------------------------------ at claim
    def _flow_head(
        self, agent: str, policy: FlowPolicy, scale: int, host: str, wait: bool, claims: Claims
    ) -> WorkItemRow | None:
        """``_lock_head`` for an agent under flow control: the item flow control lets start
        now, best first (PostgreSQL: under the agent's claim lock, as ``_lock_head``); when it
        holds items for a time, the earliest such moment goes to ``claims``."""
        if self._pg:
            if not self._pg_lock(PG_CLAIM, agent, wait=wait):
                return None
            if self._value(self._sql.running_one, (agent,)) >= scale:
                return None
        return self._flow_pick(agent, policy, host, self._clock(), claims)

    def _flow_pick(
        self, agent: str, policy: FlowPolicy, host: str, now: float, claims: Claims
    ) -> WorkItemRow | None:
        """The queued item of ``agent`` to claim now, or None when flow control holds every
        one: a resume first (its run is active for its key already), else the highest
        priority, then the oldest, of those whose key has room, whose timer is due and whose
        batch is complete (a batch is claimed by its first item). The earliest moment one it
        holds for a time may start goes to ``claims`` (``Claims.hold_until``)."""
        rows = self._exec(self._sql.flow_items, (agent, host)).fetchall()
        items = [self._item(row) for row in rows]
        resume = next((i for i in items if i.kind == "resume"), None)
        if resume is not None or not items:
            return resume
        active = dict(self._exec(self._sql.active_keys, (agent,)).fetchall())
        tats = {}
        if policy.throttle is not None:
            tats = dict(self._exec(self._sql.tats, (agent, "throttle")).fetchall())
        groups: dict[str, list[WorkItemRow]] = {}
        for item in items:
            groups.setdefault(_batch_key(item, policy), []).append(item)
        best: tuple[tuple[float, int], WorkItemRow] | None = None
        for group in groups.values():
            for item in group[:1] if policy.batch is not None else group:
                at = _start_at(item, len(group), policy, active, tats)
                if at is None or at > now:
                    claims.hold_until(at)
                    continue
                rank = (item.priority or 0.0, -item.id)
                if best is None or rank > best[0]:
                    best = (rank, item)
        return None if best is None else best[1]

    def _flow_claimed(self, item: WorkItemRow, run: RunRow, policy: FlowPolicy, now: float) -> None:
        """What a claim under flow control adds to the run it creates: its concurrency key,
        what its trigger absorbed (debounce) or gathered (batch: the rest of the batch is
        claimed with it), the throttle's count."""
        keys = _keys(item)
        if policy.concurrency:
            run.flow_key = keys.get("concurrency", "")
        flow = {k: v for k, v in (item.flow or {}).items() if k in ("keys", "count", "ids")}
        key = _batch_key(item, policy)
        if policy.batch is not None and not key.startswith(_CALL):
            members = [item]
            rows = self._exec(self._sql.flow_items, (item.agent, run.host)).fetchall()
            for row in rows:
                other = self._item(row)
                room = len(members) < policy.batch[0] and other.id != item.id
                if room and other.kind != "resume" and _batch_key(other, policy) == key:
                    members.append(other)
            for member in members[1:]:
                self._exec(self._sql.item_state, ("claimed", member.id))
            flow["batch"] = [
                {"id": m.id, "kind": m.kind, "payload": m.payload, "prompt": m.prompt,
                 "source": m.source}
                for m in members
            ]  # fmt: skip
        if flow:
            run.trigger["flow"] = flow
        if policy.throttle is not None:
            throttle_key = keys.get("throttle", "")
            tat = self._value(self._sql.tat, (item.agent, "throttle", throttle_key))
            # Due by the pick's look; a pick may have raced a host's start: it counts anyway.
            next_tat = gcra(tat, now, policy.throttle) or (tat or now) + policy.throttle.interval
            self._exec(self._sql.set_tat, (item.agent, "throttle", throttle_key, next_tat))

    # ------------------------------------------------------------ messages
    @guarded
    def flow_messages(self, host: str) -> list[tuple[int, str, str]]:
        """(id, run id, text) of the interrupt messages for runs on ``host``."""
        return [tuple(row) for row in self._exec(self._sql.messages, (host,)).fetchall()]

    @guarded
    @grouped
    def drop_flow_message(self, message_id: int) -> None:
        with self._write():
            self._exec(self._sql.drop_message, (message_id,))

    # ------------------------------------------------------------ spend
    @guarded
    @grouped
    def record_spend(
        self, agent: str, period: Any, usd: float | None, tokens: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Add one model call's cost (None: unknown) and tokens to ``agent``'s day; the
        totals (``spend_totals``) before and after, in one transaction (so exactly one call
        sees a budget threshold crossed)."""
        with self._write():
            before = self._totals(agent, period)
            self.add_spend(agent, period, usd, tokens)
            after = self._totals(agent, period)
            return before, after

    @guarded
    def add_spend(self, agent: str, period: Any, usd: float | None, tokens: int) -> None:
        """Add one model call's cost and tokens to ``agent``'s day (``record_spend`` without
        the totals: for an agent no daily or monthly budget watches)."""
        with self._write():
            params = (agent, period.day, usd or 0.0, tokens, 0 if usd is not None else 1)
            self._exec(self._sql.spend, params)

    @guarded
    def spend_totals(self, agent: str, period: Any) -> dict[str, dict[str, Any]]:
        """Spent in ``period`` (``llamaherd.budgets.Period``): ``agent_day``, ``agent_month``,
        ``project_day``, ``project_month``, each {usd, tokens, unpriced}."""
        return self._totals(agent, period)

    @guarded
    def active_runs(self) -> dict[str, tuple[int, int]]:
        """Per agent with any: (its running runs, its active ones: running or waiting)."""
        sql = self._statement(
            ("active_runs",),
            lambda: (
                "SELECT agent, SUM(CASE WHEN state = 'running' THEN 1 ELSE 0 END), COUNT(*) "
                f"FROM runs WHERE {ACTIVE} GROUP BY agent"
            ),
        )
        return {
            agent: (int(running), int(active))
            for agent, running, active in self._exec(sql).fetchall()
        }

    @guarded
    def largest_run(self, agent: str, last: int) -> int | None:
        """The most tokens one of ``agent``'s ``last`` finished runs spent (None: it has none)."""
        sql = self._statement(
            ("largest_run",),
            lambda: (
                "SELECT MAX(spent) FROM (SELECT input_tokens + output_tokens AS spent FROM runs "
                "WHERE agent = ? AND state IN ('done', 'error', 'timeout', 'killed') "
                "ORDER BY created_at DESC LIMIT ?) AS recent"
            ),
        )
        found = self._value(sql, (agent, last))
        return None if found is None else int(found)

    def _totals(self, agent: str, period: Any) -> dict[str, dict[str, Any]]:
        totals = {
            name: {"usd": 0.0, "tokens": 0, "unpriced": 0}
            for name in ("agent_day", "agent_month", "project_day", "project_month")
        }
        params = (agent, period.day, period.first, period.last)
        rows = self._exec(self._sql.spend_totals, params).fetchall()
        for mine, today, usd, tokens, unpriced in rows:
            scopes = ["project_month"] + (["agent_month"] if mine else [])
            if today:
                scopes += ["project_day"] + (["agent_day"] if mine else [])
            for scope in scopes:
                total = totals[scope]
                # PostgreSQL sums integers as numeric: plain numbers here.
                total["usd"] += float(usd or 0.0)
                total["tokens"] += int(tokens or 0)
                total["unpriced"] += int(unpriced or 0)
        return totals

    # ------------------------------------------------------------ what al runs shows
    @guarded
    def not_run(self, agent: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Triggers flow control did not run, newest first: {at, agent, what (skipped,
        dropped, superseded), trigger, key, reason}."""
        E = self._m.AgentEvent
        query = E.select().where(E.type.in_([f"trigger.{what}" for what in NOT_RUN]))
        if agent is not None:
            query = query.where(E.agent == agent)
        return [
            {
                "at": e.at, "agent": e.agent, "what": e.type.removeprefix("trigger."),
                "trigger": (e.data or {}).get("trigger"), "key": (e.data or {}).get("key"),
                "reason": (e.data or {}).get("reason"),
            }
            for e in query.order_by(E.id.desc()).limit(limit)
        ]  # fmt: skip

    # ------------------------------------------------------------ what al stat shows
    @guarded
    def flow_state(self, agent: str, policy: FlowPolicy, now: float) -> dict[str, Any]:
        """Per key: queued items, pending debounce (count, fires at), batch size, active runs,
        throttle (next start allowed at)."""
        keys: dict[str, dict[str, Any]] = {}

        def of(key: str) -> dict[str, Any]:
            return keys.setdefault(key, {"key": key, "queued": 0, "active": 0})

        rows = self._exec(self._sql.keyed_items, (agent,)).fetchall()
        for _, _, raw in rows:
            flow = json.loads(raw) if raw else {}
            own = flow.get("keys", {})
            entry = of(next((own[c] for c in _SHOWN_KEYS if c in own), ""))
            entry["queued"] += 1
            if policy.debounce is not None and "first_at" in flow:
                entry["debouncing"] = entry.get("debouncing", 0) + int(flow.get("count", 1))
        if policy.debounce is not None:
            sql = self._statement(
                ("debounce_fires",),
                lambda: (
                    "SELECT flow_key, MIN(not_before) FROM work_items WHERE state = 'queued' "
                    "AND agent = ? AND not_before IS NOT NULL GROUP BY flow_key"
                ),
            )
            for key, fires in self._exec(sql, (agent,)).fetchall():
                of(key or "")["fires_at"] = fires
        for key, count in self._exec(self._sql.active_keys, (agent,)).fetchall():
            if key is not None:
                of(key)["active"] = count
        if policy.throttle is not None:
            for key, tat in self._exec(self._sql.tats, (agent, "throttle")).fetchall():
                until = allowed_at(tat, policy.throttle)
                if until > now:
                    of(key)["throttled_until"] = until
        return {"keys": sorted(keys.values(), key=lambda e: (-e["active"], -e["queued"], e["key"]))}

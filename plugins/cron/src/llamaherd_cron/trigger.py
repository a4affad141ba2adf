"""The ``cron`` trigger type: ``schedule`` (cron, as Action Llama parses it) or ``every``
("10m") per agent.

Ticks are absolute epoch times computed from the expression, so every scheduler host derives the
same ticks and ``TriggerContext.emit_once`` makes each fire happen exactly once, across restarts
and hosts (the tick's claim and the queued run are one transaction).
"""

from __future__ import annotations

import functools
import heapq
import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from llamaherd.api import (
    Agent,
    ConfigError,
    ConfigWarning,
    LlamaherdError,
    TriggerContext,
    TriggerEvent,
    TriggerInfo,
    clock,
    parse_duration,
)
from llamaherd_cron.pattern import CronPattern

log = logging.getLogger("llamaherd.cron")

# How soon a tick whose emit failed (the database was unavailable) is tried again.
POLL_SECONDS = 0.5
# Longest sleep on the wall clock: a clock stepped back or forward is noticed within it (an
# idle scheduler wakes no more often than once a minute).
MAX_SLEEP = 60.0
SCHEDULED_TEXT = (
    "You are running on a schedule. Check for new work and act on anything you find; "
    "if there is nothing to do, say so and stop."
)
SCHEMA: dict[str, Any] = {
    "schedule": {
        "type": "string",
        "description": (
            'Cron expression: 5 fields ("*/15 * * * *"), 6 with seconds first ("*/10 * * * * *"),'
            ' 7 with a year last, or a macro such as "@hourly".'
        ),
    },
    "every": {
        "type": ["string", "integer"],
        "description": 'Fixed interval such as "30s", "10m", "1h" or "1d" (ticks aligned to UTC).',
    },
    "timezone": {
        "type": "string",
        "description": "IANA time zone for `schedule` (default: this machine's zone).",
    },
    "catchUp": {
        "type": "boolean",
        "default": True,
        "description": "After downtime, fire once for the latest missed tick.",
    },
}


def parse_interval(value: str | int) -> float:
    """Seconds in an interval such as "10m"; ValueError when malformed or under a second."""
    try:
        seconds = parse_duration(value, "every")
    except LlamaherdError as exc:
        raise ValueError(str(exc).removeprefix("every: ")) from None
    if seconds < 1:
        raise ValueError(f"expected an interval of at least 1s, got {value!r}")
    return seconds


def local_zone() -> tzinfo:
    """The machine's zone as libc picks it: ``$TZ`` when it names a zone, else
    ``/etc/localtime``, else UTC. A ZoneInfo, so DST changes apply (a fixed offset would not)."""
    key = os.environ.get("TZ", "").removeprefix(":")
    if key:
        try:
            return ZoneInfo(key) if not key.startswith("/") else _zone_file(key)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    try:
        return _zone_file("/etc/localtime")
    except (OSError, ValueError):
        return UTC


def _zone_file(path: str) -> tzinfo:
    """The zone in file ``path``, read again only when the file changed (an agent's plan asks
    for the local zone: not one read and parse per agent)."""
    found = os.stat(path)
    return _zone_of_file(path, (found.st_ino, found.st_size, found.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _zone_of_file(path: str, _stamp: tuple[int, ...]) -> tzinfo:
    with open(path, "rb") as fh:
        return ZoneInfo.from_file(fh, key="localtime")


def parse_timezone(name: str | None) -> tzinfo:
    """A zone by IANA name, or the machine's local zone (DST-aware) when ``name`` is None."""
    if name is None:
        return local_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Berlin')"
        ) from None


def never_fires(config: dict[str, Any]) -> str | None:
    """Why a valid ``schedule`` never fires (``0 0 31 2 *``: no such date), else None. Not an
    error: Action Llama accepts such a schedule, and projects use it for an agent that only
    runs when called or run by hand."""
    expr = config.get("schedule")
    if expr is None or config_problems(config):
        return None
    pattern = CronPattern.parse(str(expr))
    fires = _ever_fires(pattern) if pattern.years is None else _fires_from(pattern, clock())
    if fires:
        return None
    return f"{str(expr)!r} never fires (no such date): the agent runs only when called or by hand"


def _fires_from(pattern: CronPattern, now: float) -> bool:
    return pattern.following(now, UTC) is not None


@functools.lru_cache(maxsize=4096)
def _ever_fires(pattern: CronPattern) -> bool:
    """Whether a pattern of every year fires at all (``0 0 30 2 *`` never does): the same
    answer whenever it is asked, so once per pattern."""
    return _fires_from(pattern, clock())


def config_problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every invalid cron key of an agent config."""
    checks: list[tuple[str, Callable[[Any], Any]]] = [
        ("schedule", lambda v: CronPattern.parse(str(v))),
        ("every", parse_interval),
        ("timezone", parse_timezone),
    ]
    problems = []
    if config.get("schedule") is not None and config.get("every") is not None:
        problems.append(("every", "set either `schedule` or `every`, not both"))
    for key, check in checks:
        if config.get(key) is None:
            continue
        try:
            check(config[key])
        except (ValueError, TypeError) as exc:  # TypeError: a value of the wrong type
            problems.append((key, str(exc)))
    return problems


@dataclass
class Plan:
    """When one agent fires: a cron expression in a zone, or a fixed interval."""

    agent: str
    expr: str | None
    interval: float | None
    tz: tzinfo
    catch_up: bool

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any]) -> Plan | None:
        """The agent's plan, or None when it has neither ``schedule`` nor ``every``.
        Raises ValueError naming the first offending key (``validate`` reports them all)."""
        problems = config_problems(config)
        if problems:
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems))
        expr, every = config.get("schedule"), config.get("every")
        if expr is None and every is None:
            return None
        interval = None if every is None else parse_interval(every)
        zone = parse_timezone(config.get("timezone"))
        return cls(name, expr, interval, zone, bool(config.get("catchUp", True)))

    @cached_property
    def pattern(self) -> CronPattern:
        assert self.expr is not None
        return CronPattern.parse(self.expr)

    def latest(self, now: float) -> float:
        """The latest tick at or before ``now`` (-inf when the schedule never fired)."""
        if self.interval is not None:
            return math.floor(now / self.interval) * self.interval
        tick = self.pattern.latest(now, self.tz)
        return -math.inf if tick is None else tick

    def following(self, now: float) -> float:
        """The earliest tick strictly after ``now`` (inf when none comes: a year passed)."""
        if self.interval is not None:
            return (math.floor(now / self.interval) + 1) * self.interval
        tick = self.pattern.following(now, self.tz)
        return math.inf if tick is None else tick


def _config(agent: Agent) -> tuple[str, dict[str, Any]]:
    return agent.name, agent.config


def describe_plan(agent: Agent, now: float) -> list[TriggerInfo]:
    """The agent's ``schedule`` or ``every`` with its next tick (``describe_triggers``)."""
    config = agent.config
    try:
        plan = Plan.from_config(*_config(agent))
    except ValueError:  # `al validate` reports it
        return []
    if plan is None:
        return []
    details = {"timezone": str(config["timezone"])} if config.get("timezone") else {}
    kind = "schedule" if config.get("schedule") is not None else "every"
    summary = str(config[kind])
    following = plan.following(now)
    return [TriggerInfo(kind, summary, details, following if math.isfinite(following) else None)]


class CronTrigger:
    """TriggerType ``cron``: one thread that fires each agent's due ticks."""

    name = "cron"
    kind = "scheduled"
    description = "Runs agents on a cron `schedule` or a fixed `every` interval."
    schema = SCHEMA
    while_hibernating = True  # hibernate means: only the schedule starts runs

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}
        self._cursor: dict[str, float] = {}  # last tick handled per agent
        self._next: dict[str, float] = {}  # when each agent is next due (``next_fire``)
        self._heap: list[tuple[float, str]] = []  # (due, agent); stale entries are skipped
        self._stop = threading.Event()
        self._changed = threading.Event()  # the plans changed: the loop recomputes its sleep
        self._thread: threading.Thread | None = None
        self._ctx: TriggerContext | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ validation and display
    def validate(self, agent: Agent) -> list[ConfigError]:
        """Problems in the agent's cron keys, each naming its file and key; a schedule that
        never fires is a warning."""
        name, config = _config(agent)
        found = [
            ConfigError(str(agent.config_file), key, message)
            for key, message in config_problems(config)
        ]
        never = never_fires(config)
        if never:
            found.append(ConfigWarning(str(agent.config_file), "schedule", never))
        return found

    def plan(self, agent: Agent) -> Plan | None:
        """The agent's plan (None without schedule/every); ConfigError when it is invalid."""
        problems = [p for p in self.validate(agent) if not isinstance(p, ConfigWarning)]
        if problems:
            raise problems[0]
        return Plan.from_config(*_config(agent))

    def next_fire(self, agent: Agent, now: float) -> float | None:
        """Epoch time of the agent's next tick after ``now`` (for ``al stat``): ``inf`` when
        its schedule never fires, None without a schedule. While the trigger runs, the time it
        already computed for its timer."""
        due = self._next.get(agent.name)
        if due is not None and due > now:
            return due
        plan = self.plan(agent)
        return plan.following(now) if plan else None

    def prompt_block(self, trigger: dict[str, Any]) -> str:
        return SCHEDULED_TEXT

    # ------------------------------------------------------------ lifecycle
    def start(self, ctx: TriggerContext) -> None:
        """Plan every agent with a schedule, settle missed ticks, start the firing thread.
        An agent with an invalid schedule is logged and left out."""
        self._ctx = ctx
        self._stop.clear()
        now = ctx.clock()
        with self._lock:
            for plan in self._plan_all(ctx):
                self._plans[plan.agent] = plan
                self._cursor[plan.agent] = self._initial_cursor(ctx, plan, now)
                self._schedule(plan.agent, plan.following(self._cursor[plan.agent]))
        self._thread = threading.Thread(target=self._loop, args=(ctx,), name="al-cron", daemon=True)
        self._thread.start()

    def reconfigure(self, ctx: TriggerContext) -> None:
        """After a live reload: plan ``ctx.agents`` afresh. An unchanged plan keeps its place;
        a new or changed one fires from its next tick on (no catch-up for the old schedule);
        a removed agent fires no more."""
        now = ctx.clock()
        with self._lock:
            plans, cursor = {}, {}
            for plan in self._plan_all(ctx):
                plans[plan.agent] = plan
                if self._plans.get(plan.agent) == plan:
                    cursor[plan.agent] = self._cursor[plan.agent]
                else:
                    last = ctx.last_tick(plan.agent)
                    cursor[plan.agent] = max(plan.latest(now - 1e-3), last or -math.inf)
            self._plans, self._cursor = plans, cursor
            self._next.clear()
            self._heap.clear()
            for agent, plan in plans.items():
                self._schedule(agent, plan.following(cursor[agent]))

    def _plan_all(self, ctx: TriggerContext) -> list[Plan]:
        """The plans of ``ctx.agents`` with a schedule; an invalid one is logged, left out."""
        plans = []
        for agent in ctx.agents:
            try:
                plan = self.plan(agent)
            except ConfigError as exc:
                log.error("cron: agent %s is not scheduled: %s", agent.name, exc)
                continue
            if plan is not None:
                plans.append(plan)
        return plans

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()  # wake the loop now
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._plans.clear()
        self._cursor.clear()
        self._next.clear()
        self._heap.clear()

    def _initial_cursor(self, ctx: TriggerContext, plan: Plan, now: float) -> float:
        """Ticks at or before the cursor never fire. With catch-up after downtime, the cursor is
        the last stored tick, so the loop fires the latest missed tick exactly once; otherwise
        every tick before now counts as handled."""
        # Ticks fall on whole seconds: one at (or within a millisecond of) now is due, not missed.
        before_now = plan.latest(now - 1e-3)
        last = ctx.last_tick(plan.agent)
        if last is None:
            return before_now
        return float(last) if plan.catch_up else max(float(last), before_now)

    # ------------------------------------------------------------ firing
    def _schedule(self, agent: str, due: float) -> None:
        """Wake for ``agent`` at ``due`` (replacing its earlier entry)."""
        self._next[agent] = due
        heapq.heappush(self._heap, (due, agent))
        self._changed.set()

    def _loop(self, ctx: TriggerContext) -> None:
        """Sleep until the earliest due tick, fire what is due, compute those agents' next
        ticks: nothing runs between ticks, whatever the number of agents."""
        while not self._stop.is_set():
            now = ctx.clock()
            with self._lock:  # a reconfigure swaps the plans between passes only
                while self._heap and self._heap[0][0] <= now:
                    due, agent = heapq.heappop(self._heap)
                    plan = self._plans.get(agent)
                    if plan is None or self._next.get(agent) != due:
                        continue  # stale: the agent was rescheduled or removed
                    retry = not self._fire_due(ctx, plan, now)
                    self._schedule(agent, now + POLL_SECONDS if retry else plan.following(now))
                self._changed.clear()
                until = min(self._heap[0][0], now + MAX_SLEEP) if self._heap else now + MAX_SLEEP
            ctx.sleep(self._changed, until)

    def _fire_due(self, ctx: TriggerContext, plan: Plan, now: float) -> bool:
        """Fire the latest tick at or before ``now`` unless handled; False when it must be
        tried again (the database failed)."""
        due = plan.latest(now)
        if due <= self._cursor[plan.agent]:
            return True
        event = self._event(plan, due, now)
        try:
            fired = ctx.emit_once(plan.agent, due, event, coalesce=True)
        except Exception:  # the database may be briefly unavailable: retry soon
            log.exception("cron: cannot fire tick %s for agent %s", due, plan.agent)
            return False
        # Handled whether this host fired it or another host claimed it first.
        self._cursor[plan.agent] = due
        if fired is not None:
            late = " (catch-up)" if event.payload["catchUp"] else ""
            log.info("cron: %s fires for tick %s%s", plan.agent, event.payload["time"], late)
        return True

    def _event(self, plan: Plan, tick: float, now: float) -> TriggerEvent:
        when = datetime.fromtimestamp(tick, plan.tz).isoformat()
        late = now - tick > 1.0 + POLL_SECONDS
        payload = {"tick": tick, "time": when, "catchUp": late}
        payload["schedule" if plan.expr is not None else "every"] = (
            plan.expr if plan.expr is not None else plan.interval
        )
        return TriggerEvent(agent=plan.agent, kind="scheduled", payload=payload, source="cron")

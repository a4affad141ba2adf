"""The ``cron`` trigger type: ``schedule`` (5-field cron) or ``every`` ("10m") per agent.

Ticks are absolute epoch times computed from the expression, so every scheduler host derives the
same ticks and ``store.claim_tick`` makes each fire happen exactly once, across restarts and hosts.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from llamaherd.types import ConfigError, Emit, TriggerEvent

log = logging.getLogger("llamaherd.cron")

# Longest real-time sleep between checks: bounds fire latency and lets a fake clock (tests) be
# noticed promptly.
POLL_SECONDS = 0.5
SCHEMA: dict[str, Any] = {
    "schedule": {
        "type": "string",
        "description": 'Cron expression, 5 fields ("*/15 * * * *") or a macro such as "@hourly".',
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
    from llamaherd.durations import parse_duration
    from llamaherd.types import LlamaherdError

    try:
        seconds = parse_duration(value, "every")
    except LlamaherdError as exc:
        raise ValueError(str(exc).removeprefix("every: ")) from None
    if seconds < 1:
        raise ValueError(f"expected an interval of at least 1s, got {value!r}")
    return seconds


def parse_timezone(name: str | None) -> tzinfo:
    """A zone by IANA name, or the machine's local zone (DST-aware) when ``name`` is None."""
    if name is None:
        from dateutil import tz

        return tz.tzlocal()
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Berlin')"
        ) from None


def check_cron(expr: str) -> None:
    """Raise ValueError unless ``expr`` is a valid 5-field cron expression or an @macro."""
    from croniter import croniter

    fields = expr.split()
    if not expr.strip().startswith("@") and len(fields) != 5:
        raise ValueError(
            f"expected 5 fields (minute hour day month weekday), got {len(fields)} in {expr!r}"
        )
    if not croniter.is_valid(expr):
        raise ValueError(f"invalid cron expression {expr!r}")


def config_problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every invalid cron key of an agent config."""
    checks: list[tuple[str, Callable[[Any], Any]]] = [
        ("schedule", lambda v: check_cron(str(v))),
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
        except ValueError as exc:
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

    def latest(self, now: float) -> float:
        """The latest tick at or before ``now``."""
        if self.interval is not None:
            return math.floor(now / self.interval) * self.interval
        from croniter import croniter

        # Cron ticks fall on whole seconds, so the latest tick <= now is the one strictly
        # before floor(now) + 0.5 (croniter's get_prev is strict).
        start = datetime.fromtimestamp(math.floor(now) + 0.5, self.tz)
        return float(croniter(self.expr, start).get_prev(float))

    def following(self, now: float) -> float:
        """The earliest tick strictly after ``now``."""
        if self.interval is not None:
            return (math.floor(now / self.interval) + 1) * self.interval
        from croniter import croniter

        return float(croniter(self.expr, datetime.fromtimestamp(now, self.tz)).get_next(float))


def _config(agent: Any) -> tuple[str, dict[str, Any]]:
    return agent.name, getattr(agent, "config", {}) or {}


class CronTrigger:
    """TriggerType ``cron``: one thread that fires each agent's due ticks."""

    name = "cron"
    description = "Runs agents on a cron `schedule` or a fixed `every` interval."
    schema = SCHEMA

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}
        self._cursor: dict[str, float] = {}  # last tick handled per agent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctx: Any = None
        self._emit: Emit | None = None

    # ------------------------------------------------------------ validation and display
    def validate(self, agent: Any) -> list[ConfigError]:
        """Problems in the agent's cron keys, each naming its file and key."""
        name, config = _config(agent)
        file = str(getattr(agent, "config_file", name))
        return [ConfigError(file, key, message) for key, message in config_problems(config)]

    def plan(self, agent: Any) -> Plan | None:
        """The agent's plan (None without schedule/every); ConfigError when it is invalid."""
        problems = self.validate(agent)
        if problems:
            raise problems[0]
        return Plan.from_config(*_config(agent))

    def next_fire(self, agent: Any, now: float) -> float | None:
        """Epoch time of the agent's next tick after ``now`` (for ``al stat``), or None."""
        plan = self.plan(agent)
        return plan.following(now) if plan else None

    # ------------------------------------------------------------ lifecycle
    def start(self, ctx: Any, agents: Iterable[Any], emit: Emit) -> None:
        """Plan every agent with a schedule, settle missed ticks, start the firing thread.

        ``ctx`` is the Engine (``store``, ``clock``); ``emit`` is ``engine.emit`` and is called
        with ``coalesce=True``. An agent with an invalid schedule is logged and left out."""
        self._ctx, self._emit = ctx, emit
        self._stop.clear()
        now = self._clock()
        for agent in agents:
            try:
                plan = self.plan(agent)
            except ConfigError as exc:
                log.error("cron: agent %s is not scheduled: %s", agent.name, exc)
                continue
            if plan is None:
                continue
            self._plans[plan.agent] = plan
            self._cursor[plan.agent] = self._initial_cursor(plan, now)
        self._thread = threading.Thread(target=self._loop, name="al-cron", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._plans.clear()
        self._cursor.clear()

    def _clock(self) -> float:
        clock = getattr(self._ctx, "clock", None)
        if clock is None:
            from llamaherd.engine import clock
        return float(clock())

    def _initial_cursor(self, plan: Plan, now: float) -> float:
        """Ticks at or before the cursor never fire. With catch-up after downtime, the cursor is
        the last stored tick, so the loop fires the latest missed tick exactly once; otherwise
        every tick before now counts as handled."""
        # Ticks fall on whole seconds: one at (or within a millisecond of) now is due, not missed.
        before_now = plan.latest(now - 1e-3)
        last = self._ctx.store.last_tick(plan.agent)
        if last is None:
            return before_now
        return float(last) if plan.catch_up else max(float(last), before_now)

    # ------------------------------------------------------------ firing
    def _loop(self) -> None:
        while not self._stop.is_set():
            now = self._clock()
            wait = POLL_SECONDS
            for plan in list(self._plans.values()):
                self._fire_due(plan, now)
                wait = min(wait, plan.following(now) - now)
            self._stop.wait(max(wait, 0.01))

    def _fire_due(self, plan: Plan, now: float) -> None:
        due = plan.latest(now)
        if due <= self._cursor[plan.agent]:
            return
        try:
            claimed = self._ctx.store.claim_tick(plan.agent, due)
        except Exception:  # the database may be briefly unavailable: retry on the next pass
            log.exception("cron: cannot record tick for agent %s", plan.agent)
            return
        self._cursor[plan.agent] = due
        if not claimed:  # another scheduler host fired this tick
            return
        event = self._event(plan, due, now)
        try:
            self._emit(event, coalesce=True)
        except Exception:
            log.exception("cron: emitting scheduled trigger for agent %s failed", plan.agent)

    def _event(self, plan: Plan, tick: float, now: float) -> TriggerEvent:
        when = datetime.fromtimestamp(tick, plan.tz).isoformat()
        late = now - tick > 1.0 + POLL_SECONDS
        payload = {"tick": tick, "time": when, "catchUp": late}
        payload["schedule" if plan.expr is not None else "every"] = (
            plan.expr if plan.expr is not None else plan.interval
        )
        log.info("cron: %s fires for tick %s%s", plan.agent, when, " (catch-up)" if late else "")
        return TriggerEvent(agent=plan.agent, kind="scheduled", payload=payload, source="cron")

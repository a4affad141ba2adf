"""Spend control: ``[budget]`` per run, per day and per month, for an agent and the project.

Spend is recorded per model call in the store's ledger (``spend``: agent, day, USD, tokens,
calls of unknown price), days and months in the project's ``timezone`` (default UTC), so every
scheduler on one database counts the same spend against the same budgets.

- ``perRun`` (agent, else the project's): after each model call the session compares the run's
  totals; a run that reached it stops there (``Session``), state ``error``, reason
  ``budget: ...``, exit code ``BUDGET_EXIT``, transcript kept.
- ``daily`` / ``monthly`` (agent, and the project's for all agents together): a run that
  reaches one stops likewise; an agent past one starts nothing more (its triggers stay queued,
  bounded as always) until the period rolls over or the budget is raised. The dispatcher asks
  ``BudgetCheck``, core's own admission check (``register_admission_checks``).

A call whose model has no known price counts as unknown money: token budgets still hold, money
budgets count what is known (``al validate`` warns about such models). Crossing 80% and 100% of a
daily or monthly budget is a line in the scheduler log and a ``budget`` run event (which the
OpenTelemetry plugin turns into a metric).
"""

from __future__ import annotations

import calendar
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from llamaherd import hookimpl
from llamaherd.errors import ConfigError
from llamaherd.types import Hold

log = logging.getLogger("llamaherd.budget")

BUDGET_EXIT = 3  # the exit code of a run stopped by its budget
THRESHOLDS = (0.8, 1.0)  # fractions of a daily or monthly budget that are logged once
PERIODS = ("daily", "monthly")
EXPECTED_FROM = 20  # finished runs of an agent whose largest spend is its runs' expected spend

_LIMIT = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "properties": {
        "usd": {"type": "number", "minimum": 0, "description": "US dollars."},
        "tokens": {"type": "integer", "minimum": 0, "description": "Input plus output tokens."},
    },
}


def budget_schema(where: str) -> dict[str, Any]:
    """The ``[budget]`` table of an agent's or the project's ``config.toml``."""
    whose = "this agent's runs" if where == "agent" else "all agents together"
    return {
        "type": "object",
        "description": f"Spend limits of {whose} (see docs/flow-control.md), days and months "
        "in the project's `timezone`.",
        "additionalProperties": False,
        "properties": {
            "perRun": {
                **_LIMIT,
                "description": "What one run may spend; it stops at the end of the model call "
                f"that reaches it (reason `budget`, exit {BUDGET_EXIT})"
                + ("." if where == "agent" else "; the default of every agent's runs."),
            },
            "daily": {**_LIMIT, "description": f"What {whose} may spend per day."},
            "monthly": {**_LIMIT, "description": f"What {whose} may spend per month."},
        },
    }


def money(usd: float) -> str:
    """Dollars as people read them: cents, and the fractions of a cent small budgets need
    ("$5.00", "$0.015")."""
    text = f"{usd:,.4f}".rstrip("0")
    return "$" + (text + "0" * (2 - len(text.partition(".")[2])))


@dataclass(frozen=True)
class Limit:
    usd: float | None = None
    tokens: int | None = None

    def reached(self, usd: float, tokens: int) -> str | None:
        """What of this limit ``usd``/``tokens`` reached ("$0.52 of $0.50"), or None."""
        if self.usd is not None and usd >= self.usd:
            return f"{money(usd)} of {money(self.usd)}"
        if self.tokens is not None and tokens >= self.tokens:
            return f"{tokens:,} of {self.tokens:,} tokens"
        return None

    def fraction(self, usd: float, tokens: int) -> float:
        """The larger of the spent fractions of its money and token limits."""
        parts = [0.0]
        if self.usd:
            parts.append(usd / self.usd)
        elif self.usd == 0:
            parts.append(1.0)
        if self.tokens:
            parts.append(tokens / self.tokens)
        elif self.tokens == 0:
            parts.append(1.0)
        return max(parts)


@dataclass(frozen=True)
class Budget:
    """One ``[budget]`` table, parsed."""

    per_run: Limit | None = None
    daily: Limit | None = None
    monthly: Limit | None = None

    def period(self, name: str) -> Limit | None:
        return self.daily if name == "daily" else self.monthly


def parse_budget(file: str, table: Any) -> Budget | None:
    """``[budget]`` of a config file (None when absent), ConfigError when it is malformed."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(file, "budget", "expected a table")
    limits = {}
    for name, attr in (("perRun", "per_run"), ("daily", "daily"), ("monthly", "monthly")):
        value = table.get(name)
        if value is None:
            continue
        if not isinstance(value, dict) or not {"usd", "tokens"} & value.keys():
            raise ConfigError(file, f"budget.{name}", "expected { usd = 5 } and/or { tokens = N }")
        limits[attr] = Limit(
            usd=None if value.get("usd") is None else float(value["usd"]),
            tokens=None if value.get("tokens") is None else int(value["tokens"]),
        )
    return Budget(**limits)


def zone(project: Any) -> tzinfo:
    """The project's ``timezone`` (default UTC)."""
    from zoneinfo import ZoneInfo

    name = str(project.setting("timezone") or "UTC")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        raise ConfigError(
            str(project.config_file), "timezone", f"unknown time zone {name!r}"
        ) from None


@dataclass(frozen=True)
class Period:
    """The day and month a moment falls in, in the project's zone, and when each ends."""

    day: str  # YYYY-MM-DD
    first: str  # the month's first day, YYYY-MM-DD
    last: str  # its last day
    day_ends: float
    month_ends: float

    @classmethod
    def at(cls, when: float, tz: tzinfo) -> Period:
        local = datetime.fromtimestamp(when, tz)
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        days = calendar.monthrange(local.year, local.month)[1]
        next_month = (midnight.replace(day=1) + timedelta(days=32)).replace(day=1)
        return cls(
            day=local.strftime("%Y-%m-%d"),
            first=local.strftime("%Y-%m-01"),
            last=local.strftime(f"%Y-%m-{days:02d}"),
            day_ends=_wall(midnight + timedelta(days=1), tz),
            month_ends=_wall(next_month, tz),
        )

    def ends(self, name: str) -> float:
        return self.day_ends if name == "daily" else self.month_ends


def _wall(local: datetime, tz: tzinfo) -> float:
    """Epoch seconds of a local wall time (``local`` carries ``tz``; DST gaps resolved)."""
    return datetime(local.year, local.month, local.day, tzinfo=tz).timestamp()


@dataclass(frozen=True)
class Budgets:
    """What applies to one agent: its own ``[budget]`` and the project's."""

    agent: Budget | None
    project: Budget | None

    @property
    def per_run(self) -> Limit | None:
        if self.agent is not None and self.agent.per_run is not None:
            return self.agent.per_run
        return self.project.per_run if self.project is not None else None

    def scoped(self) -> list[tuple[str, str, Limit]]:
        """(scope "agent"|"project", period, limit) of every daily/monthly limit."""
        found = []
        for scope, budget in (("agent", self.agent), ("project", self.project)):
            for name in PERIODS:
                limit = budget.period(name) if budget is not None else None
                if limit is not None:
                    found.append((scope, name, limit))
        return found

    def __bool__(self) -> bool:
        return self.per_run is not None or bool(self.scoped())


def budgets_of(agent: Any) -> Budgets:
    """The budgets of ``agent`` (``Agent.budgets``)."""
    project = agent.project
    return Budgets(
        parse_budget(str(agent.config_file), agent.config.get("budget")),
        project_budget(project),
    )


def project_budget(project: Any) -> Budget | None:
    return parse_budget(str(project.config_file), project.config.get("budget"))


def spent(totals: dict[str, Any], scope: str, name: str) -> tuple[float, int]:
    """(usd, tokens) of ``totals`` (``store.spend_totals``) for a scope and period."""
    row = totals[f"{scope}_{'day' if name == 'daily' else 'month'}"]
    return row["usd"], row["tokens"]


def over(agent: Any, totals: dict[str, Any], period: Period) -> tuple[str, float] | None:
    """(why, until when) when ``agent`` or the project is past a daily or monthly budget."""
    for scope, name, limit in agent.budgets.scoped():
        usd, tokens = spent(totals, scope, name)
        reached = limit.reached(usd, tokens)
        if reached:
            whose = f"agent {agent.name}" if scope == "agent" else "the project"
            return f"over budget: {whose} spent {reached} {name}", period.ends(name)
    return None


def crossings(
    agent: Any, before: dict[str, Any], after: dict[str, Any]
) -> list[tuple[str, str, float, Limit, tuple[float, int]]]:
    """(scope, period, threshold, limit, spent) of each threshold the last call crossed."""
    found = []
    for scope, name, limit in agent.budgets.scoped():
        old = limit.fraction(*spent(before, scope, name))
        now_spent = spent(after, scope, name)
        new = limit.fraction(*now_spent)
        for threshold in THRESHOLDS:
            if old < threshold <= new:
                found.append((scope, name, threshold, limit, now_spent))
    return found


def describe(limit: Limit, used: tuple[float, int]) -> str:
    """ "$4.01 of $5.00" and/or "150,000 of 200,000 tokens"."""
    parts = []
    if limit.usd is not None:
        parts.append(f"{money(used[0])} of {money(limit.usd)}")
    if limit.tokens is not None:
        parts.append(f"{used[1]:,} of {limit.tokens:,} tokens")
    return ", ".join(parts)


class RunBudget:
    """One run's side of its budgets: each model call is charged to the ledger, and the run is
    told to stop once a budget is reached (``charge`` returns why)."""

    def __init__(self, ctx: Any):
        self.ctx = ctx
        self.agent = ctx.agent

    def charge(self, meta: dict[str, Any], cost: float | None, tokens: int) -> str | None:
        """Record one model call (``cost`` None: unknown price) whose tokens were ``tokens``;
        ``meta``: the run's totals after it. Why the run must stop now, or None."""
        store, engine = self.ctx.store, self.ctx.engine
        if store is None or engine is None:
            return None
        try:
            budgets, tz = self.agent.budgets, zone(self.agent.project)
        except ConfigError:  # `al validate` says why; the scheduler holds such an agent
            return None
        period = Period.at(engine.clock(), tz)
        name = self.agent.name
        if not budgets.scoped():  # kept (`al stats`), no daily or monthly total to judge
            self.ctx.record(lambda: store.add_spend(name, period, cost, tokens))
            after = None
        else:
            before, after = self.ctx.record(lambda: store.record_spend(name, period, cost, tokens))
            for scope, period_name, threshold, limit, used in crossings(self.agent, before, after):
                self._crossed(scope, period_name, threshold, limit, used)
        per_run = budgets.per_run
        run_tokens = int(meta.get("input_tokens", 0)) + int(meta.get("output_tokens", 0))
        reached = per_run.reached(float(meta.get("cost_usd", 0.0)), run_tokens) if per_run else None
        if reached:
            return f"budget: this run spent {reached} (perRun)"
        found = over(self.agent, after, period) if after is not None else None
        return f"budget: {found[0]}" if found else None

    def _crossed(
        self, scope: str, name: str, threshold: float, limit: Limit, used: tuple[float, int]
    ) -> None:
        whose = f"agent {self.agent.name}" if scope == "agent" else "the project"
        level = logging.WARNING if threshold >= 1 else logging.INFO
        log.log(
            level,
            "budget: %s has spent %s of its %s budget (%d%%)%s",
            whose, describe(limit, used), name, round(threshold * 100),
            ": it starts no more runs until the period rolls over" if threshold >= 1 else "",
        )  # fmt: skip
        self.ctx.log(
            "budget",
            {
                "scope": scope, "agent": self.agent.name, "period": name,
                "threshold": threshold, "spent_usd": round(used[0], 6), "spent_tokens": used[1],
                "limit_usd": limit.usd, "limit_tokens": limit.tokens,
            },
        )  # fmt: skip


def budget_view(agent: Any, store: Any, now: float) -> list[dict[str, Any]]:
    """Spend against each budget of ``agent``: per run (the limit), and per day and month
    (agent's and project's) what is spent, the limit, the fraction and when it resets."""
    budgets = agent.budgets
    shown: list[dict[str, Any]] = []
    if budgets.per_run is not None:
        limit = budgets.per_run
        shown.append({"scope": "run", "period": "perRun", "limit_usd": limit.usd,
                      "limit_tokens": limit.tokens})  # fmt: skip
    scoped = budgets.scoped()
    if not scoped:
        return shown
    period = Period.at(now, zone(agent.project))
    totals = store.spend_totals(agent.name, period)
    for scope, name, limit in scoped:
        used = spent(totals, scope, name)
        row = totals[f"{scope}_{'day' if name == 'daily' else 'month'}"]
        shown.append(
            {
                "scope": scope, "period": name, "spent_usd": round(used[0], 6),
                "spent_tokens": used[1], "unpriced_calls": row["unpriced"],
                "limit_usd": limit.usd, "limit_tokens": limit.tokens,
                "fraction": round(limit.fraction(*used), 4), "resets_at": period.ends(name),
            }
        )  # fmt: skip
    return shown


class BudgetCheck:
    """Core's admission check: an agent past its (or the project's) daily or monthly budget
    starts nothing until the period rolls over; one whose next run's expected spend does not
    fit beside what the active runs reserve (``reserved_hold``) waits for one of them to end."""

    name = "budget"
    description = "Holds an agent past its daily or monthly budget (or the project's)."

    def hold(self, agent: Any, store: Any, now: float) -> Hold | None:
        try:
            if not agent.budgets.scoped():
                return None
            tz = zone(agent.project)
        except ConfigError:  # a broken [budget]: `al validate` says why, nothing is held
            return None
        period = Period.at(now, tz)
        totals = store.spend_totals(agent.name, period)
        found = over(agent, totals, period)
        if found is None:
            return reserved_hold(agent, store, totals, period)
        why, until = found
        local = datetime.fromtimestamp(until, tz)
        return Hold(f"{why}; waits until {local:%Y-%m-%d %H:%M} ({local.tzname()})", until)


def expected_spend(agent: Any, store: Any, period: Period) -> Limit | None:
    """What one run of ``agent`` is expected to spend: its ``perRun`` limit; else the most one
    of its last ``EXPECTED_FROM`` finished runs spent, in tokens, and in money at what its
    tokens cost on average this month; None when it has no finished run to judge by."""
    per_run = agent.budgets.per_run
    if per_run is not None:
        return per_run
    tokens = store.largest_run(agent.name, EXPECTED_FROM)
    if tokens is None:
        return None
    month = store.spend_totals(agent.name, period)["agent_month"]
    price = month["usd"] / month["tokens"] if month["tokens"] else 0.0
    return Limit(usd=tokens * price, tokens=tokens)


def reserved_hold(agent: Any, store: Any, totals: dict[str, Any], period: Period) -> Hold | None:
    """Hold ``agent`` while a run of it would not fit in a daily or monthly budget beside what
    is spent and what the active runs in the budget's scope reserve (each its agent's
    ``expected_spend``, until it ends): until one of them ends, or until the period rolls over
    when none is active. A run whose spend cannot be judged yet (no history) reserves what is
    left: it runs alone. One that would never fit (it expects more than the whole budget) runs
    when nothing else is active, and stops at the limit."""
    active = store.active_runs()
    expected: dict[str, Limit | None] = {}

    def expect(name: str) -> Limit | None:
        if name not in expected:
            other = agent.project.agents.get(name)
            expected[name] = None if other is None else expected_spend(other, store, period)
        return expected[name]

    mine = expect(agent.name)
    for scope, name, limit in agent.budgets.scoped():
        runs = {a: n for a, (_, n) in active.items() if scope == "project" or a == agent.name}
        used = spent(totals, scope, name)
        if runs and (mine is None or any(expect(a) is None for a in runs)):
            fits = False  # a run that cannot be judged reserves what is left
        elif mine is None or not _fits(limit, (0.0, 0), (0.0, 0), mine):
            fits = not runs  # judged alone, or never fits: alone it may run
        else:
            reserved = tuple(
                sum(n * (getattr(expect(a), unit) or 0) for a, n in runs.items())
                for unit in ("usd", "tokens")
            )
            fits = _fits(limit, used, reserved, mine)
        if not fits:
            return _reserved_reason(agent, scope, name, limit, used, runs, period)
    return None


def _reserved_reason(
    agent: Any,
    scope: str,
    name: str,
    limit: Limit,
    used: tuple[float, int],
    runs: dict[str, int],
    period: Period,
) -> Hold:
    whose = f"agent {agent.name}" if scope == "agent" else "the project"
    left = f"{whose}'s {name} budget ({describe(limit, used)} spent)"
    if runs:
        count = sum(runs.values())
        return Hold(f"budget reserved: {count} active run(s) hold what is left of {left}")
    local = datetime.fromtimestamp(period.ends(name), zone(agent.project))
    return Hold(
        f"budget: a run of {agent.name} would not fit in what is left of {left}; waits until "
        f"{local:%Y-%m-%d %H:%M} ({local.tzname()})",
        period.ends(name),
    )


def _fits(limit: Limit, used: tuple[float, int], reserved: tuple[float, float], run: Limit) -> bool:
    """Whether a run expected to spend ``run`` fits in ``limit`` beside ``used`` and what
    others ``reserved`` (usd, tokens), in each unit the limit has."""
    for value, spent_now, held, expect in zip(
        (limit.usd, limit.tokens), used, reserved, (run.usd, run.tokens), strict=True
    ):
        if value is None or expect is None:
            continue
        if spent_now + held + expect > value:
            return False
    return True


@hookimpl
def register_admission_checks(register: Any) -> None:
    register(BudgetCheck())

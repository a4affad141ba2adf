"""History commands: runs, logs (a run's and the scheduler's), stats."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from llamaherd.cli import AppContext, environment_option, pass_app
from llamaherd.commands.scheduler import (
    FINAL,
    _print_events,
    _reader,
    _searchable,
    complete_agent,
    complete_run_or_agent,
    follow,
)
from llamaherd.errors import CommandFailed, LlamaherdError

if TYPE_CHECKING:
    from llamaherd.tables import Sheet


# ---------------------------------------------------------------------- runs / logs
@click.command("runs")
@click.argument("agent", required=False, shell_complete=complete_agent)
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@environment_option
@pass_app
def runs_command(app: AppContext, agent: str | None, limit: int, as_json: bool) -> None:
    """Recent runs, newest first."""
    with _reader(app) as reader:
        if agent:
            reader.check_agent(agent)
        rows = reader.runs(agent, limit)
        not_run = [] if as_json else reader.not_run(agent, limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    from llamaherd.tables import show

    show(_runs_table(rows))
    if not_run:
        show(_not_run_table(not_run))


def _not_run_table(rows: list[dict[str, Any]]) -> Sheet:
    """Triggers flow control did not run (skipped, dropped, superseded), with why."""
    from llamaherd.logview import clean
    from llamaherd.markup import escape
    from llamaherd.status import ago
    from llamaherd.tables import Sheet

    return Sheet.of(
        ["WHEN", "AGENT", "WHAT", "TRIGGER", "REASON"],
        (
            (
                ago(row["at"]),
                escape(row["agent"]),
                escape(row["what"]),
                escape(clean(str(row["trigger"] or "-"))),
                escape(clean(row["reason"] or "")),
            )
            for row in rows
        ),
        title="not run (flow control)",
    )


def _runs_table(rows: list[dict[str, Any]]) -> Sheet:
    """Runs as a table: run ids whole whatever the width (a script or a person copies them);
    what a run wrote (its reason) without terminal escapes."""
    from llamaherd.logview import clean
    from llamaherd.markup import escape
    from llamaherd.status import ago
    from llamaherd.tables import Column, Sheet
    from llamaherd.termview import styled

    columns = [Column("RUN", keep=True), "AGENT", "STATE", "EXIT", "TRIGGER", "STARTED"]
    return Sheet.of(
        [*columns, "DURATION", "REASON"],
        (
            (
                run["id"],
                escape(run["agent"]),
                styled(run["state"]),
                "-" if run["exit_code"] is None else str(run["exit_code"]),
                escape(run["trigger_kind"]),
                ago(run["started_at"]),
                _took(run["started_at"], run["finished_at"]),
                escape(clean(run["reason"] or "")),
            )
            for run in rows
        ),
    )


def _took(started: float | None, finished: float | None) -> str:
    return f"{finished - started:.1f}s" if finished and started else "-"


def _resolve_run(reader: Any, target: str) -> str:
    """The run TARGET names: an agent (its latest run), a run id or a unique prefix."""
    if target in reader.agent_names():
        latest = reader.runs(target, 1)
        if not latest:
            raise LlamaherdError(f"agent {target!r} has no runs yet")
        return latest[0]["id"]
    run = reader.run(target)
    if run is None:
        raise LlamaherdError(f"no such run or agent {target!r} (see `al runs`)")
    return run["id"]


@click.command("logs")
@click.argument("target", required=False, shell_complete=complete_run_or_agent)
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep printing as entries arrive.")
@click.option(
    "--json",
    "-r",
    "--raw",
    "as_json",
    is_flag=True,
    help="Print the entries as JSON lines, complete (a run's raw events).",
)
@click.option(
    "-n",
    "--lines",
    type=click.IntRange(min=1),
    help="Only the last N entries (default: all of a run's, the scheduler's last 50).",
)
@click.option(
    "-s",
    "--since",
    "--after",
    "since",
    metavar="WHEN",
    help="Only entries from WHEN on: a duration back from now (30m, 2h, 7d) or an ISO date "
    "or time (2026-01-15, 2026-01-15T08:00).",
)
@click.option("--before", metavar="WHEN", help="Only entries before WHEN (as --since).")
@click.option(
    "-g",
    "--grep",
    "pattern",
    metavar="REGEX",
    help="Only entries matching REGEX (a run's events are searched as their JSON).",
)
@click.option(
    "--full",
    is_flag=True,
    help="Show long tool output whole (by default its first and last lines, saying how many "
    "were cut).",
)
@click.option(
    "-a", "--all", "everything", is_flag=True, help="Every entry, those the view leaves out too."
)
@click.option(
    "-d",
    "--date",
    metavar="YYYY-MM-DD",
    help="One day (local time): the scheduler's entries of that day, or every run of AGENT "
    "started that day.",
)
@click.option(
    "-i", "--instance", metavar="RUN_ID", help="One run of AGENT: its id or a unique prefix."
)
@environment_option
@pass_app
def logs_command(
    app: AppContext,
    target: str | None,
    follow_: bool,
    as_json: bool,
    lines: int | None,
    since: str | None,
    before: str | None,
    pattern: str | None,
    full: bool,
    everything: bool,
    date: str | None,
    instance: str | None,
) -> None:
    """Print a run's log as a conversation: the assistant's text, each tool call with its
    command and output (TARGET is a run id, a unique prefix, or an agent for its latest run;
    -i picks a run of the agent, -d every run of a day). Without TARGET, the scheduler's log
    (.al/scheduler.log): run starts and ends, webhook receipts, warnings."""
    day = _day(date) if date else None
    keep = _entry_filter(since, before, pattern, day)
    if target is None:
        deployed = app.deployed_environment()
        if deployed is not None:
            raise LlamaherdError(
                f"{deployed.said}: the deployed scheduler's own log is on its server: "
                f"`al env logs {deployed.name}` (a run's log: `al logs AGENT -E {deployed.name}`)"
            )
        if instance:
            raise click.UsageError("-i/--instance needs the agent: al logs AGENT -i RUN_ID")
        shown = _scheduler_log(app, keep, lines or 50, as_json, follow_)
        if not shown and date:
            click.echo(f"the scheduler's log has no entries on {date}", err=as_json)
        return
    with _reader(app) as reader:
        run_ids = _runs_shown(reader, target, instance, day)
        if not run_ids:  # -d: a day without runs is an answer, not an error
            click.echo(f"agent {target} has no runs on {date}", err=as_json)
            return
        events = [
            (run_id, event)
            for run_id in run_ids
            for event in reader.events(run_id)
            if keep(event["at"], _searchable(event))
        ]
        shown = events[-lines:] if lines else events
        for run_id in run_ids:
            own = [event for owner, event in shown if owner == run_id]
            if as_json:
                for event in own:
                    click.echo(json.dumps(event if len(run_ids) == 1 else {"run": run_id, **event}))
                continue
            if len(run_ids) > 1 and own:
                click.echo(f"--- run {run_id}")
            _print_events(own, run_id, full, everything)
        if follow_:
            last = [event for owner, event in events if owner == run_ids[-1]]
            after = last[-1]["id"] if last else 0
            follow(reader, run_ids[-1], after=after, full=full, keep=keep, as_json=as_json)


def _day(text: str) -> tuple[float, float]:
    """The local day YYYY-MM-DD as (start, end) epoch seconds."""
    from datetime import date, datetime, timedelta

    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"expected YYYY-MM-DD, got {text!r}", param_hint="--date"
        ) from None
    start = datetime(day.year, day.month, day.day)
    return start.timestamp(), (start + timedelta(days=1)).timestamp()


def _runs_shown(
    reader: Any, target: str, instance: str | None, day: tuple[float, float] | None
) -> list[str]:
    """The runs ``al logs TARGET`` prints: one (TARGET, or -i of the agent TARGET), or with
    -d every run of the agent TARGET created that day, oldest first (none: [])."""
    if instance:
        reader.check_agent(target)
        run = reader.run(instance)
        if run is None or run["agent"] != target:
            raise LlamaherdError(
                f"no run {instance!r} of agent {target!r} (see `al runs {target}`)"
            )
        return [run["id"]]
    if day and target in reader.agent_names():
        runs = [r for r in reader.runs(target, 10_000) if day[0] <= r["created_at"] < day[1]]
        return [r["id"] for r in reversed(runs)]
    return [_resolve_run(reader, target)]


def _entry_filter(
    since: str | None,
    before: str | None,
    pattern: str | None,
    day: tuple[float, float] | None = None,
) -> Callable[[float | None, str], bool]:
    """``keep(at, text)``: whether a log entry written at ``at`` passes --since, --before,
    --date and --grep (an entry of unknown time passes the time bounds)."""
    import re

    from llamaherd.durations import parse_since

    low = parse_since(since, "--since") if since else None
    high = parse_since(before, "--before") if before else None
    if day is not None:
        low = day[0] if low is None else max(low, day[0])
        high = day[1] if high is None else min(high, day[1])
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="--grep") from None

    def keep(at: float | None, text: str) -> bool:
        if at is not None and ((low is not None and at < low) or (high is not None and at >= high)):
            return False
        return regex is None or regex.search(text) is not None

    return keep


def _scheduler_log(
    app: AppContext,
    keep: Callable[[float | None, str], bool],
    lines: int,
    as_json: bool,
    tail: bool,
) -> int:
    """The scheduler's log, ``.al/scheduler.log`` (``al logs`` without a run, as Action Llama
    has it): the last ``lines`` entries that ``keep``; with ``tail``, then new ones as they are
    written until Ctrl-C. Returns how many entries it printed first."""
    from llamaherd import schedlog

    path = app.project.state_dir / schedlog.LOG_FILE
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise CommandFailed(
            f"no scheduler log yet ({path} is written by `al start`); "
            "name a run or an agent: `al logs AGENT`"
        ) from None
    with handle:
        found = [e for e in schedlog.entries(handle.read().splitlines()) if keep(e.at, e.text)]
        _echo_entries(found[-lines:], as_json)
        while tail:
            try:
                time.sleep(0.2)
            except KeyboardInterrupt:
                break
            more = handle.read().splitlines()
            _echo_entries([e for e in schedlog.entries(more) if keep(e.at, e.text)], as_json)
    return len(found[-lines:])


def _echo_entries(entries: list[Any], as_json: bool) -> None:
    from llamaherd.logview import clean

    for entry in entries:
        click.echo(entry.json_line() if as_json else clean(entry.view()))


# ---------------------------------------------------------------------- stats
@click.command("stats")
@click.argument("agent", required=False, shell_complete=complete_agent)
@click.option(
    "-s",
    "--since",
    default="7d",
    show_default=True,
    metavar="WHEN",
    help="Window: a duration back from now (24h, 7d, 30d) or an ISO date or time.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "-n", "recent", type=click.IntRange(min=0), default=0, help="Also list the N latest runs."
)
@click.option("--calls", is_flag=True, help="Only the agent-call graph.")
@environment_option
@pass_app
def stats_command(
    app: AppContext,
    agent: str | None,
    since: str,
    as_json: bool,
    recent: int,
    calls: bool,
) -> None:
    """Run history per agent: runs, success rate, p50/p95 duration, tokens, cost; and the
    agent-call graph."""
    from llamaherd.durations import parse_since

    start = parse_since(since, "--since")
    with _reader(app) as reader:
        if agent:
            reader.check_agent(agent)
        data = reader.stats(agent, start)
        if calls:
            data = {"calls": data["calls"]}
        else:
            budgets = _budgets(reader, agent)
            if budgets:
                data["budgets"] = budgets
            if recent:
                data["recent"] = reader.runs(agent, recent)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    _print_stats(data, since)


def _budgets(reader: Any, agent: str | None) -> dict[str, Any]:
    """Spend against each budget, per agent that has one (or falls under the project's)."""
    stat = reader.stat()
    return {
        row["agent"]: {"held": row.get("held"), "budget": row["budget"], "now": stat.get("now")}
        for row in stat["agents"]
        if row.get("budget") and agent in (None, row["agent"])
    }


def _print_stats(data: dict[str, Any], since: str) -> None:
    from llamaherd.markup import escape
    from llamaherd.status import budget_line
    from llamaherd.tables import Column, Part, Sheet, show
    from llamaherd.termview import in_style

    parts: list[Part] = []
    if "agents" in data:
        parts += [f"[bold]runs since {escape(since)}[/]"]
        parts += [_agents_stats_table(data) if data["runs"] else "  none", ""]
    if data.get("budgets"):
        parts.append("[bold]budgets[/]")
        for name, spend in data["budgets"].items():
            for budget in spend["budget"]:
                parts.append(escape(f"  {name}: {budget_line(budget, spend['now'])}"))
            if spend["held"]:
                parts.append(in_style(f"  {name} waits: {spend['held']}", "yellow"))
        parts.append("")
    calls = Sheet.of(
        ["CALLER", "", "TARGET", Column("CALLS", justify="right")],
        ((escape(c["caller"]), "→", escape(c["target"]), str(c["count"])) for c in data["calls"]),
    )
    parts += ["[bold]agent calls[/]", calls if data["calls"] else "  none"]
    if data.get("recent"):
        parts += ["", "[bold]latest runs[/]", _runs_table(data["recent"])]
    show(parts)


def _agents_stats_table(data: dict[str, Any]) -> Sheet:
    from llamaherd.markup import escape
    from llamaherd.tables import Column, Sheet

    names = ("AGENT", "RUNS", "OK", "P50", "P95", "TOKENS IN", "TOKENS OUT", "COST")
    total = _stats_cells("all agents", data) if len(data["agents"]) > 1 else [""] * len(names)
    columns = [
        Column(name, justify="left" if i == 0 else "right", footer=total[i])
        for i, name in enumerate(names)
    ]
    return Sheet.of(
        columns, (_stats_cells(escape(name), row) for name, row in data["agents"].items())
    )


def _stats_cells(name: str, row: dict[str, Any]) -> list[str]:
    """A stats row: success rate over finished runs, durations, tokens, cost (unpriced calls
    marked, so a partial sum never passes for the whole)."""
    states = row["states"]
    finished = sum(states.get(state, 0) for state in FINAL)
    rate = f"{100 * states.get('done', 0) / finished:.0f}%" if finished else "-"
    cost = row["cost"]
    cost_text = f"${cost['usd']:.4f}" if cost["usd"] or not cost["unpriced_calls"] else "?"
    if cost["unpriced_calls"] and cost["usd"]:
        cost_text += f" (+{cost['unpriced_calls']} unpriced calls)"
    return [
        name,
        str(row["runs"]),
        rate,
        _seconds(row["durations"]["p50"]),
        _seconds(row["durations"]["p95"]),
        f"{row['tokens']['input']:,}",
        f"{row['tokens']['output']:,}",
        cost_text,
    ]


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}s" if value < 120 else f"{value / 60:.1f}m"


def register(cli: click.Group) -> None:
    for command in (runs_command, logs_command, stats_command):
        cli.add_command(command)

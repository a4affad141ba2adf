"""History commands: runs, logs (a run's and the scheduler's), stats."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.commands.scheduler import (
    FINAL,
    _console,
    _print_events,
    _reader,
    _searchable,
    complete_agent,
    complete_run_or_agent,
    env_option,
    follow,
)
from llamaherd.types import CommandFailed, LlamaherdError


# ---------------------------------------------------------------------- runs / logs
@click.command("runs")
@click.argument("agent", required=False, shell_complete=complete_agent)
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@env_option
@pass_app
def runs_command(
    app: AppContext, agent: str | None, limit: int, as_json: bool, environment: str | None
) -> None:
    """Recent runs, newest first."""
    with _reader(app, environment) as reader:
        if agent:
            reader.check_agent(agent)
        rows = reader.runs(agent, limit)
        not_run = [] if as_json else reader.not_run(agent, limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    _console().print(_runs_table(rows))
    if not_run:
        _console().print(_not_run_table(not_run))


def _not_run_table(rows: list[dict[str, Any]]) -> Any:
    """Triggers flow control did not run (skipped, dropped, superseded), with why."""
    from rich.table import Table
    from rich.text import Text

    from llamaherd.logview import clean
    from llamaherd.status import ago

    table = Table(
        box=None, header_style="bold", title="not run (flow control)", title_justify="left"
    )
    for column in ("WHEN", "AGENT", "WHAT", "TRIGGER"):
        table.add_column(column, no_wrap=True)
    table.add_column("REASON", overflow="fold")
    for row in rows:
        table.add_row(
            ago(row["at"]),
            row["agent"],
            row["what"],
            Text(clean(str(row["trigger"] or "-"))),
            Text(clean(row["reason"] or "")),
        )
    return table


def _runs_table(rows: list[dict[str, Any]]) -> Any:
    """Runs as a table: run ids whole whatever the width (a script or a person copies them),
    the reason folded instead; what a run wrote (its reason) without terminal escapes."""
    from rich.table import Table
    from rich.text import Text

    from llamaherd.logview import clean
    from llamaherd.status import ago
    from llamaherd.termview import STATE_STYLES

    table = Table(box=None, header_style="bold")
    widest = max((len(run["id"]) for run in rows), default=3)
    table.add_column("RUN", no_wrap=True, min_width=widest)
    for column in ("AGENT", "STATE", "EXIT", "TRIGGER", "STARTED", "DURATION"):
        table.add_column(column, no_wrap=True)
    table.add_column("REASON", overflow="fold")
    for run in rows:
        started, finished = run["started_at"], run["finished_at"]
        table.add_row(
            run["id"],
            run["agent"],
            Text(run["state"], style=STATE_STYLES.get(run["state"], "white")),
            "-" if run["exit_code"] is None else str(run["exit_code"]),
            run["trigger_kind"],
            ago(started),
            f"{finished - started:.1f}s" if finished and started else "-",
            Text(clean(run["reason"] or "")),
        )
    return table


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
@env_option
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
    environment: str | None,
) -> None:
    """Print a run's log as a conversation: the assistant's text, each tool call with its
    command and output (TARGET is a run id, a unique prefix, or an agent for its latest run).
    Without TARGET, the scheduler's log (.al/scheduler.log): run starts and ends, webhook
    receipts, warnings."""
    keep = _entry_filter(since, before, pattern)
    if target is None:
        _scheduler_log(app, keep, lines or 50, as_json, follow_)
        return
    with _reader(app, environment) as reader:
        run_id = _resolve_run(reader, target)
        events = [e for e in reader.events(run_id) if keep(e["at"], _searchable(e))]
        shown = events[-lines:] if lines else events
        if as_json:
            for event in shown:
                click.echo(json.dumps(event))
        else:
            _print_events(shown, run_id, full)
        if follow_:
            after = events[-1]["id"] if events else 0
            follow(reader, run_id, after=after, full=full, keep=keep, as_json=as_json)


def _entry_filter(
    since: str | None, before: str | None, pattern: str | None
) -> Callable[[float | None, str], bool]:
    """``keep(at, text)``: whether a log entry written at ``at`` passes --since, --before and
    --grep (an entry of unknown time passes the time bounds)."""
    import re

    from llamaherd.durations import parse_since

    low = parse_since(since, "--since") if since else None
    high = parse_since(before, "--before") if before else None
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
) -> None:
    """The scheduler's log, ``.al/scheduler.log`` (``al logs`` without a run, as Action Llama
    has it): the last ``lines`` entries that ``keep``; with ``tail``, then new ones as they are
    written until Ctrl-C."""
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
                return
            more = handle.read().splitlines()
            _echo_entries([e for e in schedlog.entries(more) if keep(e.at, e.text)], as_json)


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
@env_option
@pass_app
def stats_command(
    app: AppContext,
    agent: str | None,
    since: str,
    as_json: bool,
    recent: int,
    calls: bool,
    environment: str | None,
) -> None:
    """Run history per agent: runs, success rate, p50/p95 duration, tokens, cost; and the
    agent-call graph."""
    from llamaherd.durations import parse_since

    start = parse_since(since, "--since")
    with _reader(app, environment) as reader:
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
    from rich.table import Table

    from llamaherd.status import budget_line

    console = _console()
    if "agents" in data:
        console.print(f"[bold]runs since {since}[/]")
        console.print(_agents_stats_table(data) if data["runs"] else "  none")
    if data.get("budgets"):
        console.print("\n[bold]budgets[/]")
        for name, spend in data["budgets"].items():
            for budget in spend["budget"]:
                console.print(f"  {name}: {budget_line(budget, spend['now'])}", markup=False)
            if spend["held"]:
                console.print(f"  {name} waits: {spend['held']}", markup=False, style="yellow")
    table = Table(box=None, header_style="bold", title_justify="left")
    for column in ("CALLER", "", "TARGET", "CALLS"):
        table.add_column(column, justify="right" if column == "CALLS" else "left")
    for call in data["calls"]:
        table.add_row(call["caller"], "→", call["target"], str(call["count"]))
    console.print("\n[bold]agent calls[/]")
    console.print(table if data["calls"] else "  none")
    if data.get("recent"):
        console.print("\n[bold]latest runs[/]")
        console.print(_runs_table(data["recent"]))


def _agents_stats_table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(box=None, header_style="bold", show_footer=len(data["agents"]) > 1)
    columns = ("AGENT", "RUNS", "OK", "P50", "P95", "TOKENS IN", "TOKENS OUT", "COST")
    total = _stats_cells("all agents", data)
    for i, column in enumerate(columns):
        table.add_column(column, footer=total[i], justify="left" if i == 0 else "right")
    for name, row in data["agents"].items():
        table.add_row(*_stats_cells(name, row))
    return table


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

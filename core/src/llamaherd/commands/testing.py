"""Agent tests: ``al test``, ``al record RUN``, ``al replay RUN`` (``llamaherd.agent_tests``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app


def _usage(message: str) -> None:
    raise click.UsageError(message)


# ---------------------------------------------------------------------- al test
@click.command("test")
@click.argument("agents", nargs=-1)
@click.option(
    "-k",
    "pattern",
    metavar="PATTERN",
    help="Only cases whose id (agent/case) contains PATTERN or matches it as a glob.",
)
@click.option(
    "-n",
    "workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Cases run at once, each in its own sandbox.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option(
    "--junit",
    "junit_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write JUnit XML to FILE (for CI).",
)
@click.option(
    "--update",
    is_flag=True,
    help="Record again what no longer matches its cassette (or has none), from the live model.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Ask the agents' live models instead of the cassettes (nothing is written).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run each case N times: its pass rate and spend (with --live: a model's flakiness and cost).",
)
@pass_app
def test_command(
    app: AppContext,
    agents: tuple[str, ...],
    pattern: str | None,
    workers: int,
    as_json: bool,
    junit_file: Path | None,
    update: bool,
    live: bool,
    repeat: int,
) -> None:
    """Run the agents' test cases (agents/<name>/tests/*.toml; every agent's, or AGENTS').

    Each case is one run in the agent's own runtime (the same sandbox, hooks, prompts and tools
    as production), fenced: a private store under .al/tests/, the case's test credentials, no
    flow control, budgets or queues, calls to other agents answered by the case. The model's
    side comes from the case's cassette (no model is asked, no connection opened), unless
    --live or the case says `live = true`.

    Exit status as pytest's: 0 all passed, 1 a case failed, 2 a case file could not be read
    (or a usage error), 5 no case was found.
    """
    from llamaherd.agent_tests import report
    from llamaherd.agent_tests.cases import collect
    from llamaherd.agent_tests.execute import Plan, run_cases
    from llamaherd.tables import show

    if update and live:
        _usage("--update and --live exclude each other: --update records, --live only asks")
    project, registry = app.project, app.registry
    collected = collect(project, registry, list(agents), pattern)
    found = report.Report(errors=collected.errors, repeat=repeat)
    lock = threading.Lock()

    def said(result: Any) -> None:
        if not as_json:
            with lock:
                show(report.line(result))

    for error in collected.errors:
        if not as_json:
            click.echo(f"error: {error}", err=True)
    started = time.monotonic()
    if not collected.errors:
        mode = "update" if update else "live" if live else "replay"
        found.results = run_cases(
            project,
            registry,
            collected.cases,
            lambda case: Plan(mode),
            workers=workers,
            repeat=repeat,
            on_result=said,
        )
    found.duration = time.monotonic() - started
    if junit_file is not None:
        junit_file.write_text(report.junit(found, project.root), encoding="utf-8")
    if as_json:
        click.echo(report.as_json(report.session_dict(found, project.root)))
        sys.exit(found.exit_code)
    failed = [r for r in found.results if not r.passed]
    if failed:
        show("")
        show([line for r in failed for line in report.failure_lines(r, project.root)])
    if repeat > 1 and found.results:
        report.repeat_table(report.repeat_rows(found))
    if not found.results and not found.errors:
        where = ", ".join(agents) or "any agent"
        click.echo(f"no test cases found for {where} (agents/<name>/tests/*.toml)", err=True)
    show(report.summary(found))
    sys.exit(found.exit_code)


def register(cli: click.Group) -> None:
    cli.add_command(test_command)

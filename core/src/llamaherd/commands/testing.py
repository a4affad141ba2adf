"""Agent tests: ``al test``, ``al record RUN``, ``al replay RUN`` (``llamaherd.agent_tests``)."""

from __future__ import annotations

import signal
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
    help="Cases run at once, each in a worker process and a sandbox of its own.",
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
    (or a usage error), 5 no case was found; 130 interrupted (Ctrl-C, SIGTERM).
    """
    from llamaherd.agent_tests import report
    from llamaherd.agent_tests.cases import collect
    from llamaherd.agent_tests.execute import Plan, run_cases
    from llamaherd.tables import show

    if update and live:
        _usage("--update and --live exclude each other: --update records, --live only asks")
    if update and repeat > 1:
        _usage("--update records each cassette once: run it without --repeat")
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
        # A cancelled CI job's SIGTERM ends the runs as Ctrl-C does, not al test alone.
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            found.results = run_cases(
                project,
                registry,
                collected.cases,
                lambda case: Plan(mode),
                workers=workers,
                repeat=repeat,
                on_result=said,
            )
        except KeyboardInterrupt:
            click.echo("al test interrupted: the runs going on and their sandboxes ended", err=True)
            sys.exit(130)
        finally:
            signal.signal(signal.SIGTERM, previous)
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


def _store(app: AppContext) -> Any:
    from llamaherd.store import Store

    return Store.open(app.project.database_url, str(app.project.root))


# ---------------------------------------------------------------------- al record
@click.command("record")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--name", help="The case's name (its file agents/<agent>/tests/NAME.toml); default run-<id>."
)
@click.option("--force", is_flag=True, help="Replace a case of that name.")
@pass_app
def record_command(app: AppContext, run_id: str, name: str | None, force: bool) -> None:
    """Write a test case from a finished run RUN (id or prefix): its trigger, its model
    answers as the case's cassette, and expectations proposed from what it did (its state,
    return value, commands, tool calls, calls), to edit. `al test AGENT` then runs it."""
    from llamaherd.agent_tests.record import record_run

    project, store = app.project, _store(app)
    try:
        written, notes = record_run(project, app.registry, store, run_id, name, force)
    finally:
        store.close()
    for path in written:
        click.echo(f"wrote {project.relative(path)}")
    for note in notes:
        click.echo(f"note: {note}", err=True)
    agent, case = written[0].parent.parent.name, written[0].stem
    click.echo(
        f"edit [expect] in {project.relative(written[0])}, then: al test {agent} -k {case}",
        err=True,
    )


# ---------------------------------------------------------------------- al replay
@click.command("replay")
@click.argument("run_id", metavar="RUN")
@click.option("--model", metavar="M", help="Ask the model [models.M] for every turn instead.")
@click.option(
    "--skill",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Use this SKILL.md instead of the agent's.",
)
@click.option(
    "--from-turn",
    type=click.IntRange(min=1),
    metavar="N",
    help="Fork after turn N: turns 1..N as recorded (their tool calls run again in a fresh "
    "sandbox), the live model from turn N+1.",
)
@click.option("--live", is_flag=True, help="Ask the live model for every turn.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@pass_app
def replay_command(
    app: AppContext,
    run_id: str,
    model: str | None,
    skill: Path | None,
    from_turn: int | None,
    live: bool,
    as_json: bool,
) -> None:
    """Run a finished run's trigger again against the agent as it is now (or another model,
    another SKILL.md, or from one of its turns on), fenced like a test, and show what changed
    side by side: state, return value, spend, each turn's tool calls, the commands run.

    Without --live/--model the run's recorded answers are played while the requests match
    them, and the live model answers from the first turn that differs."""
    from llamaherd.agent_tests.replay import replay, replayed_dict
    from llamaherd.agent_tests.report import as_json as dumps
    from llamaherd.tables import print_table, show

    store = _store(app)
    try:
        done = replay(
            app.project,
            app.registry,
            store,
            run_id,
            model=model,
            skill=skill,
            from_turn=from_turn,
            live=live,
        )
    finally:
        store.close()
    if as_json:
        click.echo(dumps(replayed_dict(done)))
        return
    replayed = done.result.run.run_id if done.result.run is not None else "(did not run)"
    show(f"original: run {done.original.run_id}; replay: run {replayed} (fenced, not kept)")
    print_table(
        [" ", "WHAT", "ORIGINAL", "REPLAY"],
        [
            ("≠" if row.differs else "", row.what, _cell(row.original), _cell(row.replay))
            for row in done.rows
        ],
    )
    for note in done.notes:
        show(f"note: {_cell(note)}")
    changed = sum(1 for row in done.rows if row.differs)
    show(f"{changed} of {len(done.rows)} rows differ" if done.rows else "the replay did not run")


def _cell(text: str) -> str:
    from llamaherd.markup import escape

    return escape(text)


def register(cli: click.Group) -> None:
    cli.add_command(test_command)
    cli.add_command(record_command)
    cli.add_command(replay_command)

"""``al doctor [--fix] [--yes] [--json]``: the project and this machine, checked."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from llamaherd.cli import AppContext, environment_option, pass_app
from llamaherd.errors import ConfigError, LlamaherdError
from llamaherd.types import Finding

STYLES = {"ok": "green", "warning": "yellow", "error": "red"}


@click.command("doctor")
@click.option("--fix", is_flag=True, help="Fix what can be fixed here, asking before each fix.")
@click.option(
    "--yes", "-y", is_flag=True, help="With --fix: do not ask (fixes that need input are skipped)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@environment_option
@click.option(
    "--strict",
    is_flag=True,
    help="Warnings about keys llamaherd reads differently or does not act on are errors, as "
    "Action Llama's --strict makes unknown fields errors.",
)
@pass_app
def doctor_command(app: AppContext, fix: bool, yes: bool, as_json: bool, strict: bool) -> None:
    """Check the project and this machine: everything `al validate` checks, then the
    credentials (valid, where their type can tell), webhook secrets, model keys and base URLs,
    the gateway port, scales, the database, the scheduler, and what plugins check (the Docker
    daemon and images, host-user users, ...). Exit 1 when anything is an error.

    With --fix, offers to fix what it can (build an image, create a user, add a missing
    credential, migrate the database), then checks again. With --strict, a warning about a
    key llamaherd reads differently or does not act on is an error.
    """
    from llamaherd.doctor import Result, failed, run_checks, strict_config

    try:
        project = app.project
    except ConfigError as exc:  # nothing else can be checked without the project config
        results = [Result("config", Finding.error(exc.file, str(exc)))]
        _report(results, [], as_json, fix)
        sys.exit(1)
    checked = strict_config if strict else run_checks
    results = checked(project, app.registry)
    applied: list[Any] = []
    shown = False  # the first report was printed before the fixes were offered
    if fix and any(_fixable(r) for r in results):
        if not as_json:
            _print(results, fix)
            shown = True
        applied = _apply_fixes(results, yes)
        if applied:
            results = checked(project, app.registry)
            if not as_json:
                click.echo("after fixing:")
    if as_json or not shown or applied:
        _report(results, applied, as_json, fix)
    sys.exit(1 if failed(results) else 0)


def _fixable(result: Any) -> bool:
    return result.finding.status != "ok" and result.finding.fix is not None


def _apply_fixes(results: list[Any], yes: bool) -> list[Any]:
    """Offer each fix (asking on stderr unless ``yes``); the results a fix was tried for."""
    tried = []
    for result in results:
        if not _fixable(result):
            continue
        fix = result.finding.fix
        label = f"{result.check}: {result.finding.subject}: {fix.description}"
        if yes and fix.interactive:
            click.echo(f"skipped (needs your input; run without --yes): {label}", err=True)
            continue
        if not yes and not click.confirm(f"{label}?", default=True, err=True):
            continue
        try:
            result.fixed = fix.apply()
            click.echo(f"fixed: {result.finding.subject}: {result.fixed}", err=True)
        except (LlamaherdError, OSError, click.Abort) as exc:
            result.fix_error = str(exc) or type(exc).__name__
            click.echo(f"fix failed: {result.finding.subject}: {result.fix_error}", err=True)
        tried.append(result)
    return tried


def _report(results: list[Any], applied: list[Any], as_json: bool, fix: bool) -> None:
    if as_json:
        click.echo(json.dumps(_document(results, applied), indent=2))
    else:
        _print(results, fix)


def _document(results: list[Any], applied: list[Any]) -> dict[str, Any]:
    from llamaherd.doctor import failed

    return {
        "ok": not failed(results),
        "findings": [
            {
                "check": r.check,
                "subject": r.finding.subject,
                "status": r.finding.status,
                "message": r.finding.message,
                "fix": r.finding.fix.description if r.finding.fix else None,
            }
            for r in results
        ],
        "fixes": [
            {
                "check": r.check,
                "subject": r.finding.subject,
                "fix": r.finding.fix.description,
                "done": r.fixed,
                "error": r.fix_error,
            }
            for r in applied
        ],
    }


def _print(results: list[Any], fix: bool) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    width = max((len(r.check) for r in results), default=0)
    for r in results:
        status = r.finding.status
        line = (
            f"[{STYLES.get(status, 'white')}]{status:7}[/] {r.check:{width}}  "
            f"{escape(r.finding.subject)}: {escape(r.finding.message)}"
        )
        if status != "ok" and r.finding.fix and not fix:
            line += f" [dim](--fix: {escape(r.finding.fix.description)})[/]"
        console.print(line)
    _summary(results, fix)


def _summary(results: list[Any], fix: bool) -> None:
    count = {s: sum(r.finding.status == s for r in results) for s in STYLES}
    fixable = sum(_fixable(r) for r in results)
    line = f"{count['error']} error(s), {count['warning']} warning(s), {count['ok']} ok"
    if fixable and not fix:
        line += f"; `al doctor --fix` can fix {fixable}"
    click.echo(line)


def register(cli: click.Group) -> None:
    cli.add_command(doctor_command)

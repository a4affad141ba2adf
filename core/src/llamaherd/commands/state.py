"""Agent state commands: ``al state AGENT [idle|hibernate|off]``, ``al approve RUN``, ``al deny RUN``.

Each goes through the running scheduler's control API when there is one (so ``off`` kills runs
where they run), else acts on the database directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.status import DISPLAY_STATES


@contextmanager
def _local_engine(app: AppContext) -> Iterator[Any]:
    """An Engine on the project's database, without triggers or a server (no scheduler up)."""
    from llamaherd.engine import Engine

    engine = Engine(app.project)
    try:
        yield engine
    finally:
        engine.close()


def through(
    app: AppContext, path: str, body: dict[str, Any] | None, local: Callable[[Any], Any]
) -> Any:
    """POST ``body`` to the scheduler's ``path`` (GET when None), else ``local(engine)`` on the
    project's database (no scheduler up)."""
    from llamaherd.client import ControlClient

    client = ControlClient.find(app.project)
    if client is not None:
        return client.get(path) if body is None else client.post(path, body)
    with _local_engine(app) as engine:
        return local(engine)


def _when(at: float | None) -> str:
    return "-" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@click.command("state")
@click.argument("agent")
@click.argument("state", required=False, type=click.Choice(DISPLAY_STATES))
@click.option("--reason", default="", help="Why (recorded with the change).")
@click.option("--wake", is_flag=True, help="With active: run it even if hibernating or off.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the state, or the change).")
@pass_app
def state_command(
    app: AppContext, agent: str, state: str | None, reason: str, wake: bool, as_json: bool
) -> None:
    """Print AGENT's state, or set it: idle (every trigger runs), hibernate (only its schedule),
    off (nothing fires; its runs are killed and its queue cleared), active (run it now),
    suspended (hold: triggers queue, nothing runs until idle). See docs/agent-states.md."""
    from llamaherd.agents import change_state, state_of

    app.project.agent(agent)
    path = f"/control/agents/{agent}/state"
    if state is None:
        info = through(app, path, None, lambda engine: state_of(engine, agent))
        if as_json:
            click.echo(json.dumps(info, indent=2))
            return
        shown = (
            info["state"]
            if info["shown"] == info["state"]
            else f"{info['state']} ({info['shown']})"
        )
        click.echo(f"{agent}: {shown}")
        if info["cause"]:
            click.echo(f"  since {_when(info['since'])}: {info['cause']}")
        return
    cause = f"al state: {reason}" if reason else "set with `al state`"
    answer = through(
        app,
        path,
        {"state": state, "cause": cause, "wake": wake},
        lambda engine: change_state(engine, agent, state, cause, wake),
    )
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    line = f"{agent}: {answer['previous']} -> {answer['state']}"
    if answer.get("queued") is not None:
        line += f"; queued a run (work item {answer['queued']})"
    if answer["killed"]:
        line += f"; killed {len(answer['killed'])} run(s): {', '.join(answer['killed'])}"
    if answer["dropped"]:
        line += f"; dropped {answer['dropped']} queued trigger(s)"
    click.echo(line)


def _answer_command(approve: bool) -> click.Command:
    verb = "approve" if approve else "deny"

    @click.command(verb)
    @click.argument("run")
    @click.option("--reason", default="", help="Why (recorded with the answer).")
    @pass_app
    def command(app: AppContext, run: str, reason: str) -> None:
        from llamaherd.agents import answer_suspension

        cause = f"al {verb}: {reason}" if reason else f"answered with `al {verb}`"
        answer = through(
            app,
            f"/control/runs/{run}/{verb}",
            {"cause": cause},
            lambda engine: answer_suspension(engine, run, approve, cause),
        )
        if approve:
            click.echo(f"run {answer['run']} approved: it resumes with a renewed turn budget")
        else:
            click.echo(f"run {answer['run']} denied: killed, and its agent is off")

    command.help = (
        "Resume RUN, suspended at its agent's maxTurns, with a renewed turn budget."
        if approve
        else "Refuse to resume RUN, suspended at its maxTurns: it is killed, its agent goes off."
    )
    return command


def register(cli: click.Group) -> None:
    for command in (state_command, _answer_command(True), _answer_command(False)):
        cli.add_command(command)

"""Scheduler commands: start, stop, run, stat, runs, logs, kill, pause, resume, stats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.types import LlamaherdError

FINAL = ("done", "error", "timeout", "killed")


def _store(app: AppContext) -> Any:
    from llamaherd.store import Store

    return Store.open(app.project.database_url, str(app.project.root))


def env_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``-E/--env NAME``: read from the scheduler deployed as NAME instead of this project."""
    return click.option(
        "-E",
        "--env",
        "environment",
        envvar="AL_ENV",
        metavar="NAME",
        help="Read from the scheduler deployed as environment NAME (through its plugin, "
        "e.g. over SSH) instead of this project's store.",
    )(command)


@contextmanager
def _reader(app: AppContext, environment: str | None) -> Iterator[Any]:
    """The local project's store, or the control API of ``environment``'s scheduler."""
    from llamaherd.readers import ControlReader, StoreReader

    if not environment:
        yield StoreReader(_store(app), app.project, app.registry)
        return
    from llamaherd.client import ControlClient

    with ControlClient.for_environment(environment) as client:
        yield ControlReader(client)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _load_payload(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise LlamaherdError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise LlamaherdError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LlamaherdError(f"{path}: expected a JSON object")
    return data


# ---------------------------------------------------------------------- start / stop
@click.command("start")
@click.option("--detach", is_flag=True, help="Run in the background (log in .al/scheduler.log).")
@click.option(
    "--port", type=int, default=None, help="Override [gateway] port (0 picks a free one)."
)
@click.option(
    "--bind",
    default=None,
    metavar="ADDRESS",
    help="Override [gateway] bind (0.0.0.0 in a container whose port is published).",
)
@click.option(
    "--grace", type=float, default=30.0, show_default=True, help="Seconds active runs get on stop."
)
@click.option(
    "-e", "--expose", is_flag=True, help="Listen on all interfaces (0.0.0.0), not [gateway] bind."
)
@click.option(
    "-H",
    "--headless",
    is_flag=True,
    help="Plain log lines, no live view (the default when not in a terminal).",
)
@click.option(
    "-w",
    "--web-ui",
    is_flag=True,
    help="Accepted for Action Llama users: the dashboard is served (at /) whenever "
    "llamaherd-dashboard is installed.",
)
@pass_app
def start_command(
    app: AppContext,
    detach: bool,
    port: int | None,
    bind: str | None,
    grace: float,
    expose: bool,
    headless: bool,
    web_ui: bool,
) -> None:
    """Run the scheduler: triggers, dispatcher and the HTTP server. In a terminal, a live view
    (agents, active runs, recent results, queue depth) below the log lines; it applies edits
    of agents/ and config.toml as they are saved."""
    from llamaherd.plugins import get_manager

    project = app.project
    overrides = {"port": port, "bind": bind or ("0.0.0.0" if expose else None)}
    if web_ui and "dashboard" not in get_manager().info:
        click.echo("warning: --web-ui: no dashboard: pip install llamaherd-dashboard", err=True)
    if detach:
        _detach(project, overrides, grace)
        return
    from llamaherd.scheduler import Scheduler

    _configure_logging(project.name if project.name != project.root.name else None)
    scheduler = Scheduler(project, grace=grace, gateway=overrides)
    click.echo(f"scheduler {scheduler.host} starting for {project.root}", err=True)
    from llamaherd.termview import TerminalView, wants_view

    if not wants_view(headless):
        sys.exit(scheduler.run())
    with TerminalView(scheduler):
        code = scheduler.run()
    sys.exit(code)


def _configure_logging(project_name: str | None = None) -> None:
    """Log lines on stderr, prefixed with ``[projectName]`` when the project sets one."""
    import logging

    prefix = f"[{project_name}] ".replace("%", "%%") if project_name else ""
    logging.basicConfig(
        level=os.environ.get("AL_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s {prefix}%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _detach(project: Any, overrides: dict[str, Any], grace: float) -> None:
    from llamaherd.scheduler import scheduler_info

    project.state_dir.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "llamaherd",
        "--project",
        str(project.root),
        "start",
        "--grace",
        str(grace),
    ]
    for key, value in overrides.items():
        if value is not None:
            args += [f"--{key}", str(value)]
    with open(project.state_dir / "scheduler.log", "ab") as log:
        child = subprocess.Popen(
            args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = scheduler_info(project.state_dir)
        if info and info["pid"] == child.pid:
            (project.state_dir / "scheduler.pid").write_text(str(child.pid))
            click.echo(
                f"scheduler started: pid {child.pid}, {info['url']} (log: .al/scheduler.log)"
            )
            return
        if child.poll() is not None:
            raise LlamaherdError(f"scheduler exited with {child.returncode}; see .al/scheduler.log")
        time.sleep(0.05)
    raise LlamaherdError("scheduler did not come up within 30 s; see .al/scheduler.log")


@click.command("stop")
@pass_app
def stop_command(app: AppContext) -> None:
    """Stop the running scheduler (active runs get its grace period)."""
    from llamaherd.client import ControlClient
    from llamaherd.scheduler import pid_alive

    client = ControlClient.find(app.project)
    if client is None:
        raise LlamaherdError("no scheduler is running for this project")
    client.post("/control/stop")
    while pid_alive(client.pid):
        time.sleep(0.05)
    click.echo(f"scheduler {client.pid} stopped")


# ---------------------------------------------------------------------- run
@click.command("run")
@click.argument("agent")
@click.argument("prompt", required=False)
@click.option(
    "--payload", type=click.Path(dir_okay=False, path_type=Path), help="JSON payload file."
)
@click.option("--no-follow", is_flag=True, help="Queue the run on the scheduler and return.")
@click.option("--wake", is_flag=True, help="Set a hibernating or off agent idle first.")
@click.option(
    "-H", "--headless", is_flag=True, help="Accepted for Action Llama users: never prompts."
)
@pass_app
def run_command(
    app: AppContext,
    agent: str,
    prompt: str | None,
    payload: Path | None,
    no_follow: bool,
    wake: bool,
    headless: bool,
) -> None:
    """Run AGENT now: through the running scheduler (or the schedulers sharing its database),
    else in the foreground. PROMPT, when given, is the task: it goes into the run's prompt. A
    hibernating or switched-off agent refuses it unless --wake.

    Prints the run's log and exits with its exit code (0 done, 1 error, 124 timeout).
    """
    from llamaherd.agents import queue_manual
    from llamaherd.client import ControlClient

    project = app.project
    project.agent(agent)
    data = _load_payload(payload)
    if prompt is not None:
        data["prompt"] = prompt
    client = ControlClient.find(project)
    if client is not None:
        body = {"agent": agent, "payload": data, "wake": wake}
        item = client.post("/control/run", body)["items"][0]
    elif _live_hosts(app):
        item = _queue_on_shared_database(project, agent, data, wake)
    else:
        sys.exit(
            run_foreground(
                project, agent, lambda engine: queue_manual(engine, agent, data, wake=wake)[0]
            )
        )
    if no_follow:
        click.echo(f"queued run of {agent} (work item {item}); follow it with `al logs {agent} -f`")
        return
    from llamaherd.readers import StoreReader

    store = _store(app)
    sys.exit(follow(StoreReader(store), _wait_for_item(store, agent, item)))


def _live_hosts(app: AppContext) -> list[str]:
    """Schedulers on other machines heartbeating into a shared (non-SQLite) database."""
    from llamaherd.scheduler import host_stale_after

    if app.project.database_url.startswith("sqlite"):
        return []
    now = time.time()
    return [h["host"] for h in _store(app).hosts() if now - h["heartbeat_at"] < host_stale_after()]


def _queue_on_shared_database(project: Any, agent: str, payload: dict[str, Any], wake: bool) -> int:
    """Queue a manual run for the schedulers sharing the database to pick up."""
    from llamaherd.agents import queue_manual
    from llamaherd.engine import Engine

    engine = Engine(project)
    try:
        result = queue_manual(engine, agent, payload, wake=wake)[0]
    finally:
        engine.close()
    if result.refused:
        raise LlamaherdError(result.refused)
    return result.queued


def _wait_for_item(store: Any, agent: str, item: int) -> str:
    while True:
        for run in store.runs(agent=agent, limit=200):
            if run.item_id == item:
                return run.id
        time.sleep(0.05)


def run_foreground(
    project: Any,
    agent_name: str,
    queue: Callable[[Any], Any],
    watch: Callable[[Any, str], Any] | None = None,
) -> int:
    """No scheduler: this process dispatches the project's queue until our run has ended;
    its exit code.

    ``queue(engine)`` queues the run (an ``EmitResult``); ``watch(engine, run_id)`` runs in a
    thread until the run has ended (default: print its log)."""
    from llamaherd.engine import Engine
    from llamaherd.readers import StoreReader
    from llamaherd.schema import validate_project

    watch = watch or (lambda engine, run_id: follow(StoreReader(engine.store), run_id))
    engine = Engine(project)
    try:
        errors = [
            p for p in validate_project(project, engine.registry, (agent_name,)) if p.is_error
        ]
        if errors:
            raise LlamaherdError("\n".join(str(p) for p in errors))
        result = queue(engine)
        if result.refused:
            raise LlamaherdError(result.refused)
        engine.serve("127.0.0.1", 0)
        run_id = None
        while run_id is None:
            engine.dispatch()
            run_id = next(
                (
                    r.id
                    for r in engine.store.runs(agent=agent_name, limit=200)
                    if r.item_id == result.queued
                ),
                None,
            )
            if run_id is None:
                engine.wakeup.wait(0.1)
        watcher = threading.Thread(target=watch, args=(engine, run_id), daemon=True)
        watcher.start()
        try:
            while watcher.is_alive():
                engine.wakeup.clear()
                engine.dispatch()
                for run in engine.store.expired_waits(engine.clock()):
                    engine.runner.expire_wait(run)
                engine.wakeup.wait(0.2)
        except KeyboardInterrupt:
            engine.kill(run_id, reason="interrupted by user")
            watcher.join(10)
            return 130
        final = engine.store.get_run(run_id)
        return final.exit_code if final and final.exit_code is not None else 1
    finally:
        engine.stopping.set()
        for thread in list(engine.threads.values()):
            thread.join(5)
        engine.close()


def follow(reader: Any, run_id: str, *, poll: float = 0.1) -> int:
    """Print a run's events as they arrive until it has ended; return its exit code.

    ``reader`` is a ``llamaherd.readers.Reader``: the local store or a remote control API.
    """
    from llamaherd.logview import format_event

    console = _console()
    after = 0
    while True:
        run = reader.run(run_id)
        for event in reader.events(run_id, after):
            after = event["id"]
            console.print(format_event(event))
        if run is None or run["state"] in FINAL:
            if run is not None and run["return_value"] is not None:
                console.print(f"[bold green]return value:[/] {json.dumps(run['return_value'])}")
            state, code = (run["state"], run["exit_code"]) if run else ("gone", None)
            console.print(f"[bold]run {run_id} {state}[/] (exit {'?' if code is None else code})")
            return code if code is not None else 1
        time.sleep(poll)


# ---------------------------------------------------------------------- stat / runs / logs
@click.command("stat")
@click.argument("agent", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--watch", is_flag=True, help="Live view (active runs, recent results), redrawn every second."
)
@env_option
@pass_app
def stat_command(
    app: AppContext, agent: str | None, as_json: bool, watch: bool, environment: str | None
) -> None:
    """Agents (or AGENT): state, active/scale, queue depth, last result, next scheduled fire;
    with --watch, the live view `al start` shows in a terminal (active runs with their
    status, recent results, queue depth)."""
    from llamaherd.termview import stat_view

    with _reader(app, environment) as reader:
        if agent:
            reader.check_agent(agent)

        def stat() -> dict[str, Any]:
            found = reader.stat()
            found["agents"] = [row for row in found["agents"] if agent in (None, row["agent"])]
            return found

        if as_json:
            click.echo(json.dumps(stat(), indent=2))
            return
        if not watch:
            _console().print(stat_view(stat()))
            return
        _watch(reader, agent)


def _watch(reader: Any, agent: str | None) -> None:
    """``al stat --watch``: the view ``al start`` shows, redrawn every second (in a terminal;
    else printed anew every second) until Ctrl-C."""
    from contextlib import nullcontext

    from rich.live import Live

    from llamaherd.termview import redraw_after, render, snapshot

    console = _console()
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    try:
        with live or nullcontext():
            while True:
                start = time.monotonic()
                view = render(snapshot(reader, agent))
                if live is None:
                    console.print(view)
                else:
                    live.update(view, refresh=True)
                time.sleep(redraw_after(time.monotonic() - start))
    except KeyboardInterrupt:
        pass


@click.command("runs")
@click.argument("agent", required=False)
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
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    _console().print(_runs_table(rows))


def _runs_table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    from llamaherd.status import ago
    from llamaherd.termview import STATE_STYLES

    table = Table(box=None, header_style="bold")
    for column in ("RUN", "AGENT", "STATE", "EXIT", "TRIGGER", "STARTED", "DURATION", "REASON"):
        table.add_column(column)
    for run in rows:
        started, finished = run["started_at"], run["finished_at"]
        table.add_row(
            run["id"],
            run["agent"],
            f"[{STATE_STYLES.get(run['state'], 'white')}]{run['state']}[/]",
            "-" if run["exit_code"] is None else str(run["exit_code"]),
            run["trigger_kind"],
            ago(started),
            f"{finished - started:.1f}s" if finished and started else "-",
            run["reason"] or "",
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
@click.argument("target", required=False)
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep printing until the run ends.")
@click.option(
    "--json", "-r", "--raw", "as_json", is_flag=True, help="Print raw events as JSON lines."
)
@click.option(
    "-n", "--lines", type=click.IntRange(min=1), help="Only the last N entries (default: all)."
)
@env_option
@pass_app
def logs_command(
    app: AppContext,
    target: str | None,
    follow_: bool,
    as_json: bool,
    lines: int | None,
    environment: str | None,
) -> None:
    """Print a run's log (TARGET is a run id, a unique prefix, or an agent for its latest run);
    without TARGET, the log of the scheduler started with `al start --detach`."""
    from llamaherd.logview import format_event

    if target is None:
        _scheduler_log(app, lines)
        return
    with _reader(app, environment) as reader:
        run_id = _resolve_run(reader, target)
        if follow_:
            follow(reader, run_id)
            return
        console = _console()
        for event in reader.events(run_id)[-lines if lines else 0 :]:
            if as_json:
                click.echo(json.dumps(event))
            else:
                console.print(format_event(event))


def _scheduler_log(app: AppContext, lines: int | None) -> None:
    """The tail of ``.al/scheduler.log`` (``al logs`` without a run, as Action Llama has it)."""
    path = app.project.state_dir / "scheduler.log"
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise LlamaherdError(
            "no scheduler log (.al/scheduler.log is written by `al start --detach`); "
            "name a run or an agent: `al logs AGENT`"
        ) from None
    click.echo("\n".join(text.splitlines()[-(lines or 50) :]))


# ---------------------------------------------------------------------- kill / pause / resume
@click.command("kill")
@click.argument("target")
@pass_app
def kill_command(app: AppContext, target: str) -> None:
    """Kill a run (id or prefix), or every live run of an agent."""
    from llamaherd.client import ControlClient

    client = ControlClient.find(app.project)
    if client is None:
        raise LlamaherdError("no scheduler is running for this project (`al start`)")
    killed = client.post("/control/kill", {"target": target})["killed"]
    click.echo(f"killed {len(killed)} run(s): {', '.join(killed) or '-'}")


def _pause_command(paused: bool) -> click.Command:
    verb = "pause" if paused else "resume"

    @click.command(verb)
    @click.argument("agent", required=False)
    @pass_app
    def command(app: AppContext, agent: str | None) -> None:
        if agent:
            app.project.agent(agent)
        _store(app).set_paused(agent, paused)
        click.echo(f"{verb}d {agent or 'the scheduler'}")

    command.help = (
        "Stop starting runs (of AGENT, or of every agent); triggers keep queueing."
        if paused
        else "Start runs again (of AGENT, or of every agent)."
    )
    return command


# ---------------------------------------------------------------------- stats
@click.command("stats")
@click.argument("agent", required=False)
@click.option("-s", "--since", default="14d", show_default=True, help="Window: e.g. 1h, 7d.")
@click.option("--json", "as_json", is_flag=True)
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
    """Run history: counts, durations, exit codes, tokens, the agent-call graph."""
    from llamaherd.durations import parse_duration

    window = parse_duration(since, "--since")
    with _reader(app, environment) as reader:
        if agent:
            reader.check_agent(agent)
        data = reader.stats(agent, time.time() - window)
        if calls:
            data = {"calls": data["calls"]}
        elif recent:
            data["recent"] = reader.runs(agent, recent)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    console = _console()
    for key, value in data.items():
        console.print(f"[bold]{key}[/]: {json.dumps(value, default=str)}")


def register(cli: click.Group) -> None:
    for command in (
        start_command,
        stop_command,
        run_command,
        stat_command,
        runs_command,
        logs_command,
        kill_command,
        _pause_command(True),
        _pause_command(False),
        stats_command,
    ):
        cli.add_command(command)
    cli.add_command(stat_command, name="status")  # Action Llama's name for `al stat`

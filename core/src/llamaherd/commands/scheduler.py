"""Scheduler commands: start, stop, run, stat, kill, pause, resume; and what the read
commands share (readers, following a run, shell completion)."""

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
from typing import TYPE_CHECKING, Any

import click

from llamaherd.cli import AppContext, environment_option, pass_app
from llamaherd.errors import CommandFailed, Conflict, LlamaherdError
from llamaherd.statedir import open_private, private_dir

if TYPE_CHECKING:
    from llamaherd.client import ControlClient

FINAL = ("done", "error", "timeout", "killed")
NO_FOLLOW_WAIT = 5  # seconds `al run --no-follow` waits for its run to start
# `al run`'s own exit codes, beside its run's (docs/cli.md): the agent's flow control skipped,
# dropped or superseded the trigger (nothing runs for it); an admission check (a budget spent)
# holds the agent until a known moment, its trigger queued until then.
NOT_RUN_EXIT = 4
HELD_EXIT = 5
DETACHED_ENV = "AL_DETACHED"  # set for the scheduler process `al start --detach` starts


def _store(app: AppContext) -> Any:
    from llamaherd.store import Store

    return Store.open(app.project.database_url, str(app.project.root))


@contextmanager
def _reader(app: AppContext) -> Iterator[Any]:
    """The control API of the command's deployed environment (``app.remote()``); else of this
    project's running scheduler (its rows are ready: no project to load, no store to open);
    else the store."""
    from llamaherd.client import ControlClient
    from llamaherd.readers import ControlReader, StoreReader

    remote = app.remote()
    if remote is not None:
        with remote:
            yield ControlReader(remote)
        return
    state_dir = app.state_dir
    local = ControlClient.of_state_dir(state_dir) if state_dir is not None else None
    if local is None:
        yield StoreReader(_store(app), app.project, app.registry)
        return
    with local:
        yield ControlReader(local)


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _load_payload(path: Path | None) -> dict[str, Any]:
    """The JSON object in file ``path`` (``-``: standard input), made valid and within the
    shape limits of any value from outside (``llamaherd.inbound``); {} without one."""
    from llamaherd.inbound import OverLimit, parse

    if path is None:
        return {}
    try:
        data = parse(sys.stdin.read() if str(path) == "-" else path.read_text())
    except OSError as exc:
        raise LlamaherdError(f"{path}: cannot read: {exc.strerror}") from None
    except OverLimit as exc:
        raise LlamaherdError(f"{path}: the payload {exc}") from None
    except ValueError as exc:
        raise LlamaherdError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LlamaherdError(f"{path}: expected a JSON object")
    return data


# ---------------------------------------------------------------------- shell completion
def _completion_project(ctx: click.Context) -> Any:
    """The project a command line being completed names (``al -p DIR``), else the one found
    from the current directory. No AppContext exists yet while completing."""
    from llamaherd.project import load_project

    return load_project(ctx.find_root().params.get("project_dir"))


def complete_agent(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Agent names for shell completion (nothing when no project is found: never an error)."""
    try:
        names = list(_completion_project(ctx).agents)
    except Exception:  # completion must never print a traceback into the shell
        return []
    return [name for name in names if name.startswith(incomplete)]


def complete_run_or_agent(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Agent names, then the ids of the latest runs, for shell completion."""
    names = complete_agent(ctx, param, incomplete)
    try:
        from llamaherd.store import Store

        project = _completion_project(ctx)
        store = Store.open(project.database_url, str(project.root))
        try:
            ids = [run.id for run in store.runs(limit=100)]
        finally:
            store.close()
    except Exception:  # as above
        return names
    return names + [run_id for run_id in ids if run_id.startswith(incomplete)]


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
@environment_option
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
        from llamaherd.install import install_command

        dashboard = install_command("llamaherd-dashboard")
        click.echo(f"warning: --web-ui: no dashboard: {dashboard}", err=True)
    if detach:
        _detach(project, overrides, grace)
        return
    from llamaherd.drivers import scheduler_only

    scheduler_only(sqlite=project.database_url.startswith("sqlite:"))
    from llamaherd import schedlog
    from llamaherd.scheduler import Scheduler

    # The child of `al start --detach` logs to the file only: its stderr is that file already.
    schedlog.configure(project, to_stderr=os.environ.get(DETACHED_ENV) != "1")
    scheduler = Scheduler(project, grace=grace, gateway=overrides)
    click.echo(f"scheduler {scheduler.host} starting for {project.root}", err=True)
    from llamaherd.termview import TerminalView, wants_view

    if not wants_view(headless):
        _exit_now(scheduler.run())
    with TerminalView(scheduler):
        code = scheduler.run()
    _exit_now(code)


def _exit_now(code: int) -> None:
    """Exit once the scheduler has stopped cleanly (its state is in the database, its threads
    are done): exit handlers run (a plugin's flush), but not the interpreter's teardown of
    every module, which would take most of an idle stop's time."""
    import atexit
    import logging

    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _detach(project: Any, overrides: dict[str, Any], grace: float) -> None:
    """Start the scheduler in the background, its output appended to ``.al/scheduler.log``;
    return once it is up. When it exits instead, what it wrote (the lines ``al start`` would
    have printed: each config error, then why it stopped) goes to stderr, and ``al`` exits
    with its exit code (2 for a config error, as ``al start``)."""
    from llamaherd import schedlog
    from llamaherd.local import scheduler_info

    private_dir(project.state_dir)
    args = [sys.executable, "-m", "llamaherd", "--project", str(project.root), "start"]
    args += ["--grace", str(grace)]
    if project.requested_environment:
        args += ["--env", project.requested_environment]
    for key, value in overrides.items():
        if value is not None:
            args += [f"--{key}", str(value)]
    path = project.state_dir / schedlog.LOG_FILE
    with open_private(path) as log:
        offset = os.fstat(log.fileno()).st_size
        child = subprocess.Popen(
            args,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, DETACHED_ENV: "1"},
        )
    deadline = time.monotonic() + 30
    listening = False  # then it loads its agents, as long as that takes
    while listening or time.monotonic() < deadline:
        info = scheduler_info(project.state_dir)
        if info and info["pid"] == child.pid and not listening:
            listening = True
            with open_private(project.state_dir / "scheduler.pid", "wb") as fh:
                fh.write(str(child.pid).encode())
        if listening and info and not info.get("loading"):
            click.echo(
                f"scheduler started: pid {child.pid}, {info['url']} (log: .al/scheduler.log)"
            )
            return
        if child.poll() is not None:
            code = child.returncode if child.returncode > 0 else 1  # < 0: killed by a signal
            said = _written_since(path, offset) or (
                f"error: the scheduler exited with {code} and wrote nothing (see .al/scheduler.log)"
            )
            click.echo(said, err=True)
            sys.exit(code)
        time.sleep(0.05)
    raise CommandFailed("the scheduler did not come up within 30 s; see .al/scheduler.log")


def _written_since(path: Path, offset: int) -> str:
    """What a detached scheduler wrote to its log from ``offset`` on, without control
    characters (it may quote what a config file holds)."""
    from llamaherd.logview import clean

    with path.open("rb") as log:
        log.seek(offset)
        return clean(log.read().decode(errors="replace")).strip()


def _answers(client: Any) -> bool:
    """Whether the scheduler behind ``client`` answers at all."""
    try:
        client.get("/health")
    except CommandFailed:
        return False
    return True


@click.command("stop")
@environment_option
@pass_app
def stop_command(app: AppContext) -> None:
    """Stop the running scheduler (active runs get its grace period)."""
    from llamaherd.client import ControlClient
    from llamaherd.processes import pid_alive

    remote = app.remote()
    if remote is not None:
        with remote:
            try:
                remote.post("/control/stop")
            except CommandFailed:
                # Taken, and the scheduler gone before its answer came back: then nothing
                # answers there any more.
                if _answers(remote):
                    raise
        click.echo(f"stop requested: the scheduler at {remote.url} stops once its runs end")
        return
    client = ControlClient.find(app.project)
    if client is None:
        raise CommandFailed("no scheduler is running for this project")
    try:
        client.post("/control/stop")
    except CommandFailed:
        # The stop may have been taken and the scheduler gone before its answer reached us.
        if not _exits_within(client.pid, 5.0):
            raise
    store = _store(app)
    said = None
    while pid_alive(client.pid):
        active = sorted(r.id for r in store.runs(states=("running",), limit=500))
        waiting_for = (
            f"waiting for {len(active)} active run(s) to end: {', '.join(active)} "
            "(past the scheduler's grace period they are requeued)"
            if active
            else f"waiting for scheduler {client.pid} to exit"
        )
        if waiting_for != said:
            click.echo(waiting_for, err=True)
            said = waiting_for
        time.sleep(0.1)
    click.echo(f"scheduler {client.pid} stopped")


def _exits_within(pid: int | None, seconds: float) -> bool:
    from llamaherd.processes import pid_alive

    if pid is None:
        return False  # not a process of this machine: nothing to watch
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------------- run
@click.command("run")
@click.argument("agent", shell_complete=complete_agent)
@click.argument("prompt", required=False)
@click.option(
    "--payload",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="JSON payload file (- reads standard input).",
)
@click.option(
    "--no-follow",
    is_flag=True,
    help="Queue the run on the scheduler, print its run id once it starts and return.",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Ctrl-C stops following but leaves the run (or its queued trigger) to the scheduler.",
)
@click.option("--wake", is_flag=True, help="Set a hibernating or off agent idle first.")
@click.option(
    "--last-good",
    is_flag=True,
    help="When the running scheduler refused AGENT's config on disk, run the last good "
    "version it keeps (said on stderr) instead of refusing.",
)
@click.option(
    "-H", "--headless", is_flag=True, help="Accepted for Action Llama users: never prompts."
)
@environment_option
@pass_app
def run_command(
    app: AppContext,
    agent: str,
    prompt: str | None,
    payload: Path | None,
    no_follow: bool,
    detach: bool,
    wake: bool,
    last_good: bool,
    headless: bool,
) -> None:
    """Run AGENT now: through the running scheduler (or the schedulers sharing its database),
    else in the foreground. PROMPT, when given, is the task: it goes into the run's prompt. A
    hibernating or switched-off agent refuses it unless --wake.

    Prints the run's log and exits with its exit code (0 done, 1 error, 3 budget, 124
    timeout); 4 when the agent's flow control skipped, dropped or superseded the trigger, 5
    when a budget holds the agent (the trigger stays queued). A run that has to wait says why
    (the agent's scale, paused, its flow control); Ctrl-C then withdraws it, or kills the run
    once it started, unless --detach.
    """
    from llamaherd.client import ControlClient

    data = _load_payload(payload)
    if prompt is not None:
        data["prompt"] = prompt
    body = {"agent": agent, "payload": data, "wake": wake}
    remote = app.remote()
    if remote is not None:
        with remote:
            sys.exit(_run_remote(remote, agent, body, no_follow))
    client = _local_scheduler_taking(app, agent)
    if client is not None and no_follow:
        _queue_and_report(client, agent, body)
        return
    if client is not None:
        # Queued before the project is loaded: the run starts while this loads what following
        # it needs (the scheduler checks the agent, and has its config).
        answer = client.post("/control/run", body)
        project = _project_to_follow(app, answer["items"][0])
    else:
        project = app.project
        project.agent(agent)
        client = ControlClient.find(project)
        if client is not None:  # a scheduler that refused the config on disk
            _check_on_disk(app, agent, last_good)
            answer = client.post("/control/run", body)
        elif _live_hosts(app):
            answer = _queue_on_shared_database(project, agent, data, wake)
        else:
            from llamaherd.agents import queue_manual

            sys.exit(
                run_foreground(
                    project, agent, lambda engine: queue_manual(engine, agent, data, wake=wake)[0]
                )
            )
    from llamaherd.readers import StoreReader

    item, handed = answer["items"][0], _triaged(agent, answer)
    store = _store(app)
    try:
        reader = StoreReader(store, project, app.registry)
        hint = " (Ctrl-C leaves it queued)" if detach else " (Ctrl-C withdraws it)"
        why = None if no_follow else (lambda: _why_queued(reader, agent) + hint)
        run_id = handed or _wait_for_item(
            reader.store, agent, item, 5.0 if no_follow else None, why
        )
        if run_id is None:  # --no-follow, still queued
            click.echo(f"queued (work item {item}): {_why_queued(reader, agent)}", err=True)
            return
        if no_follow:
            click.echo(run_id)
            click.echo(f"follow it with `al logs {run_id} -f`", err=True)
            return
        sys.exit(follow(reader, run_id))
    except KeyboardInterrupt:
        sys.exit(_interrupted(store, client, item, detach))


def _local_scheduler_taking(app: AppContext, agent: str) -> ControlClient | None:
    """The client of the scheduler running here when it runs ``agent``'s config on disk, so a
    run can be queued without loading the project; None when none runs here, or when it
    refused that config (the slower way refuses, or says which version runs)."""
    from llamaherd.client import ControlClient
    from llamaherd.local import scheduler_info

    state_dir = app.state_dir
    client = ControlClient.of_state_dir(state_dir) if state_dir is not None else None
    if client is None:
        return None
    info = scheduler_info(state_dir) or {}
    if info.get("refused_all") or agent in (info.get("kept") or []):
        return None
    return client


def _queue_and_report(client: ControlClient, agent: str, body: dict[str, Any]) -> None:
    """``al run --no-follow``: queue the run and answer with its id once started."""
    answer = client.post("/control/run", {**body, "started_within": NO_FOLLOW_WAIT})
    run_id = _triaged(agent, answer) or (answer.get("runs") or [None])[0]
    if run_id is None:
        item = answer["items"][0]
        why = f"not started within {NO_FOLLOW_WAIT} s (`al stat {agent}` says why)"
        click.echo(f"queued (work item {item}): {why}", err=True)
        return
    click.echo(run_id)
    click.echo(f"follow it with `al logs {run_id} -f`", err=True)


def _project_to_follow(app: AppContext, item: int) -> Any:
    """The project, loaded to follow a run already queued: when it does not load, say that the
    run was queued all the same, then why it cannot be followed."""
    try:
        return app.project
    except LlamaherdError:
        click.echo(f"queued (work item {item}); it cannot be followed here:", err=True)
        raise


def _run_remote(client: Any, agent: str, body: dict[str, Any], no_follow: bool) -> int:
    """``al run -E NAME``: queue the run on the deployed scheduler and follow it there."""
    from llamaherd.readers import ControlReader

    reader = ControlReader(client)
    answer = client.post("/control/run", body)
    item, handed = answer["items"][0], _triaged(agent, answer)
    while True:
        run_id = handed or next(
            (r["id"] for r in reader.runs(agent, 50) if r["item_id"] == item), None
        )
        if run_id is not None:
            break
        if no_follow:
            click.echo(f"queued on {client.url} (work item {item})", err=True)
            return 0
        time.sleep(0.2)
    if no_follow:
        click.echo(run_id)
        return 0
    return follow(reader, run_id, poll=0.5)


def _check_on_disk(app: AppContext, agent: str, last_good: bool) -> None:
    """Never run a config other than the one on disk without saying so: when the running
    scheduler refused ``agent``'s files (it runs their last good version), refuse, or with
    ``last_good`` say which version runs."""
    from llamaherd.local import scheduler_info
    from llamaherd.status import scheduler_status

    status = scheduler_status(app.project, scheduler_info(app.project.state_dir))
    if not status["running"] or not (status["refused_all"] or agent in status["kept"]):
        return
    mine = [p for p in status["config_errors"] if p.startswith(f"agents/{agent}/")]
    problems = "".join(f"\n  {p}" for p in (mine or status["config_errors"]))
    if not last_good:
        raise LlamaherdError(
            f"the running scheduler refused the config on disk for {agent}:{problems}\n"
            f"fix it (`al validate {agent}`), or run the last good version it keeps with "
            f"`al run {agent} --last-good`"
        )
    click.echo(
        f"note: running the last good config of {agent}; the scheduler refused the one on "
        f"disk:{problems}",
        err=True,
    )


def _why_queued(reader: Any, agent: str) -> str:
    """Why a queued run of ``agent`` has not started: paused, held (a budget...), its flow
    control (a debounce window, a throttle...), its scale, the project's cap."""
    from llamaherd.status import key_line

    rows = reader.agents()
    row = next(r for r in rows if r["agent"] == agent)
    if row["state"] == "paused":
        return f"runs of {agent} are paused (`al resume {agent}`)"
    if row.get("held"):
        return row["held"]
    waiting = [key for key in (row.get("flow") or {}).get("keys", []) if key.get("queued")]
    if waiting:
        return "flow control: " + "; ".join(key_line(key, None) for key in waiting[:3])
    if row["active"] >= row["scale"]:
        return f"{agent} is at its scale ({row['active']}/{row['scale']} runs active)"
    cap = reader.project.config.get("scale")
    active = sum(r["active"] for r in rows)
    if isinstance(cap, int) and active >= cap:
        return f"the project is at its scale cap ({active}/{cap} runs active)"
    return "waiting for the scheduler to start it"


def _interrupted(store: Any, client: Any, item: int, detach: bool) -> int:
    """Ctrl-C during ``al run``: withdraw the queued item or kill its run, unless ``detach``."""
    if detach:
        click.echo(f"\nleft to the scheduler (work item {item}); `al runs` shows it", err=True)
        return 130
    if store.withdraw(item):
        click.echo("\ninterrupted: the queued run was withdrawn", err=True)
        return 130
    run_id = _run_of_item(store, item)
    if run_id is not None and client is not None:
        client.post("/control/kill", {"target": run_id})
        click.echo(f"\ninterrupted: run {run_id} killed", err=True)
    return 130


def _live_hosts(app: AppContext) -> list[str]:
    """Schedulers on other machines heartbeating into a shared (non-SQLite) database."""
    from llamaherd.scheduler import host_stale_after

    if app.project.database_url.startswith("sqlite"):
        return []
    now = time.time()
    return [h["host"] for h in _store(app).hosts() if now - h["heartbeat_at"] < host_stale_after()]


def _queue_on_shared_database(
    project: Any, agent: str, payload: dict[str, Any], wake: bool
) -> dict[str, Any]:
    """Queue a manual run for the schedulers sharing the database to pick up; the control
    API's answer to the same (``trigger_answer``)."""
    from llamaherd.agents import queue_manual, trigger_answer
    from llamaherd.engine import Engine

    engine = Engine(project)
    try:
        result = queue_manual(engine, agent, payload, wake=wake)[0]
        if result.refused:
            raise Conflict(result.refused)
        return trigger_answer(engine, agent, [result])
    finally:
        engine.close()


def _triaged(agent: str, answer: dict[str, Any], *, queued: bool = True) -> str | None:
    """Say what flow control or an admission check did with ``al run``'s trigger (the control
    API's answer, ``trigger_answer``), and end here with ``NOT_RUN_EXIT`` when nothing will
    run for it, ``HELD_EXIT`` when it waits for a hold with a known end (a budget's period;
    ``queued``: a scheduler has it, else it was withdrawn). The id of the active run it was
    handed to (a singleton ``interrupt``), to follow that; else None (follow its item: a hold
    with no known end is said while it waits)."""
    item, flow = answer["items"][0], (answer.get("flow") or [None])[0]
    if item is None and flow and flow.startswith("interrupted "):
        run_id = flow.removeprefix("interrupted ")
        click.echo(f"handed to the active run {run_id} of its key (singleton interrupt)", err=True)
        return run_id
    if item is None:
        click.echo(f"not run: {agent}'s flow control: {flow or 'not queued'}", err=True)
        sys.exit(NOT_RUN_EXIT)
    if answer.get("held_until") is not None:
        then = (
            f"the trigger stays queued (work item {item}) and runs then (`al stat {agent}`)"
            if queued
            else "not queued: no scheduler runs here to start it then"
        )
        click.echo(f"held: {answer['held']}; {then}", err=True)
        sys.exit(HELD_EXIT)
    if flow == "debounced":
        click.echo(f"debounced: merged into its key's pending trigger (work item {item})", err=True)
    elif flow:
        click.echo(f"flow control: {flow}", err=True)
    return None


def _run_of_item(store: Any, item: int, agent: str | None = None) -> str | None:
    """The run work item ``item`` became: its own, or the batch that gathered it."""
    for run in store.runs(agent=agent, limit=200):
        batch = (run.trigger.get("flow") or {}).get("batch") or []
        if run.item_id == item or any(member["id"] == item for member in batch):
            return run.id
    return None


def _dropped(store: Any, agent: str, item: int) -> str | None:
    """Why queued item ``item`` was dropped before it ran (superseded by a newer trigger, its
    queue full), or None while it was not."""
    if store.item_state(item) != "dropped":
        return None
    for event in store.agent_events(agent, limit=200):
        data = event["data"] or {}
        if data.get("item_id") == item:
            return data.get("reason") or f"the queue of {agent} was full ({data.get('limit')})"
    return "dropped from its queue"


def _wait_for_item(
    store: Any,
    agent: str,
    item: int,
    give_up: float | None = None,
    why: Callable[[], str] | None = None,
    tick: Callable[[], None] | None = None,
) -> str | None:
    """The id of the run work item ``item`` became, once it starts; None after ``give_up``
    seconds. When it has to wait a second, ``why()`` is said once on stderr. ``tick()`` runs
    between two looks (default: a short sleep; a foreground run dispatches there)."""
    tick = tick or (lambda: time.sleep(0.05))
    started = time.monotonic()
    said = why is None
    while True:
        run_id = _run_of_item(store, item, agent)
        if run_id is not None:
            return run_id
        dropped = _dropped(store, agent, item)
        if dropped is not None:
            click.echo(f"not run: {dropped}", err=True)
            sys.exit(NOT_RUN_EXIT)
        waited = time.monotonic() - started
        if give_up is not None and waited >= give_up:
            return None
        if not said and waited >= 1.0:
            click.echo(f"queued: {why()}", err=True)  # type: ignore[misc]
            said = True
        tick()


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
    from llamaherd.agents import trigger_answer
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
            raise Conflict(result.refused)
        answer = trigger_answer(engine, agent_name, [result])
        if answer.get("held_until") is not None:  # no scheduler here will start it then
            engine.store.withdraw(result.queued)
        _triaged(agent_name, answer, queued=False)
        engine.serve("127.0.0.1", 0)
        reader = StoreReader(engine.store, project, engine.registry)

        def dispatch() -> None:
            engine.wakeup.clear()  # else a wake-up set once makes every later wait return at once
            engine.dispatch()
            engine.wakeup.wait(0.1)

        try:
            run_id = _wait_for_item(
                engine.store,
                agent_name,
                result.queued,
                why=lambda: _why_queued(reader, agent_name) + " (Ctrl-C withdraws it)",
                tick=dispatch,
            )
        except KeyboardInterrupt:
            engine.store.withdraw(result.queued)
            click.echo("\ninterrupted: the queued run was withdrawn", err=True)
            return 130
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


def follow(
    reader: Any,
    run_id: str,
    *,
    poll: float = 0.1,
    after: int = 0,
    full: bool = False,
    keep: Callable[[float | None, str], bool] | None = None,
    as_json: bool = False,
) -> int:
    """Print a run's events after event id ``after`` as they arrive (those that ``keep``) until
    the run has ended; return its exit code.

    ``reader`` is a ``llamaherd.readers.Reader``: the local store or a remote control API.
    """
    console = _console()
    while True:
        run = reader.run(run_id)
        events = reader.events(run_id, after)
        after = events[-1]["id"] if events else after
        events = [e for e in events if keep is None or keep(e["at"], _searchable(e))]
        if as_json:
            for event in events:
                click.echo(json.dumps(event))
        else:
            _print_events(events, run_id, full)
        if run is None or run["state"] in FINAL:
            code = run["exit_code"] if run else None
            if not as_json:
                if run is not None and run["return_value"] is not None:
                    console.print(f"[bold green]return value:[/] {json.dumps(run['return_value'])}")
                state = run["state"] if run else "gone"
                console.print(
                    f"[bold]run {run_id} {state}[/] (exit {'?' if code is None else code})"
                )
            return code if code is not None else 1
        time.sleep(poll)


# ---------------------------------------------------------------------- stat
@click.command("stat")
@click.argument("agent", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--watch", is_flag=True, help="Live view (active runs, recent results), redrawn every second."
)
@environment_option
@pass_app
def stat_command(app: AppContext, agent: str | None, as_json: bool, watch: bool) -> None:
    """Agents (or AGENT): state, active/scale, queue depth, last result, next scheduled fire;
    with --watch, the live view `al start` shows in a terminal (active runs with their
    status, recent results, queue depth)."""
    from llamaherd.termview import stat_view

    with _reader(app) as reader:
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
            from llamaherd.tables import show

            show(stat_view(stat()))
            return
        _watch(reader, agent)


def _watch(reader: Any, agent: str | None) -> None:
    """``al stat --watch``: the view ``al start`` shows, redrawn every second (in a terminal;
    else printed anew every second) until Ctrl-C."""
    from contextlib import nullcontext

    from rich.console import Console
    from rich.live import Live

    from llamaherd.termview import redraw_after, render, snapshot

    # Wrapped at spaces (not soft_wrap): a live display crops what is wider than the terminal,
    # which cut the scheduler line mid-URL.
    console = Console(highlight=False)
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


def _searchable(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False)


def _print_events(
    events: list[dict[str, Any]], run_id: str, full: bool, everything: bool = False
) -> None:
    """The conversation view of a run's events (``everything``: none left out)."""
    from llamaherd.logview import format_event, worth_showing

    console = _console()
    for event in events if everything else filter(worth_showing, events):
        console.print(format_event(event, full=full, run_id=run_id))


# ---------------------------------------------------------------------- kill / pause / resume
@click.command("kill")
@click.argument("target", shell_complete=complete_run_or_agent)
@environment_option
@pass_app
def kill_command(app: AppContext, target: str) -> None:
    """Kill a run (id or prefix), or every live run of an agent."""
    from llamaherd.client import ControlClient

    client = app.remote() or ControlClient.find(app.project)
    if client is None:
        raise CommandFailed("no scheduler is running for this project (`al start`)")
    with client:
        killed = client.post("/control/kill", {"target": target})["killed"]
    click.echo(f"killed {len(killed)} run(s): {', '.join(killed) or '-'}")


def _pause_command(paused: bool) -> click.Command:
    verb = "pause" if paused else "resume"

    @click.command(verb)
    @click.argument("agent", required=False, shell_complete=complete_agent)
    @environment_option
    @pass_app
    def command(app: AppContext, agent: str | None) -> None:
        from llamaherd.client import ControlClient

        remote = app.remote()
        if remote is None and agent:
            app.project.agent(agent)
        # Through the scheduler (a deployed one with -E, else the local one when it runs):
        # it wakes its dispatcher at once (a resume starts runs now) and, like every control
        # call, checks the token; else in the store.
        client = remote or ControlClient.find(app.project)
        if client is None:
            _store(app).set_paused(agent, paused)
        else:
            with client:
                client.post(f"/control/{verb}", {"agent": agent or ""})
        click.echo(f"{verb}d {agent or 'the scheduler'}")

    command.help = (
        "Stop starting runs (of AGENT, or of every agent); triggers keep queueing."
        if paused
        else "Start runs again (of AGENT, or of every agent)."
    )
    return command


def register(cli: click.Group) -> None:
    for command in (
        start_command,
        stop_command,
        run_command,
        stat_command,
        kill_command,
        _pause_command(True),
        _pause_command(False),
    ):
        cli.add_command(command)
    cli.add_command(stat_command, name="status")  # Action Llama's name for `al stat`

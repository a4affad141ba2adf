"""The commands: ``al env`` (named environments), ``al push``, ``al service`` (on a server)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from llamaherd.api import AppContext, CommandFailed, LlamaherdError, pass_app
from llamaherd_deploy import environments

# --------------------------------------------------------------------------- al env


@click.group("env")
def env_group() -> None:
    """Named deployment environments (~/.action-llama/environments/NAME.toml)."""


@env_group.command("add")
@click.argument("name")
@click.option(
    "--host", required=True, help="Server host name or address (or an ~/.ssh/config alias)."
)
@click.option("--user", default=environments.DEFAULT_USER, show_default=True, help="SSH user.")
@click.option("--port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--key", help="SSH private key file (default: your agent and ~/.ssh keys).")
@click.option(
    "--path",
    "base",
    help=f"Deployment directory on the server [default: {environments.ROOT_BASE} as root, "
    f"else {environments.USER_BASE}].",
)
@click.option(
    "--ssh-option",
    "ssh_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra `ssh -o` option, repeatable (e.g. ProxyJump=bastion).",
)
@click.option("--python", default=environments.DEFAULT_PYTHON, show_default=True,
              help="Python 3.11+ command on the server.")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace an existing environment of that name.")
def env_add(
    name: str,
    host: str,
    user: str,
    port: int,
    key: str | None,
    base: str | None,
    ssh_options: tuple[str, ...],
    python: str,
    force: bool,
) -> None:
    """Add environment NAME: where `al push NAME` deploys."""
    environments.check_name(name)
    if base is not None and not (base.startswith("/") or base.startswith("~/")):
        raise LlamaherdError(f"--path {base}: expected an absolute path or ~/... on the server")
    for option in ssh_options:
        if "=" not in option:
            raise LlamaherdError(f"--ssh-option {option}: expected KEY=VALUE")
    if key and not Path(key).expanduser().is_file():
        click.echo(f"warning: --key {key}: no such file here", err=True)
    env = environments.Environment(
        name=name,
        host=host,
        user=user,
        port=port,
        key=str(Path(key).expanduser().absolute()) if key else None,
        path=base,
        ssh_options=ssh_options,
        python=python,
    )
    path = environments.save(env, replace=force)
    click.echo(
        f"added environment {name}: {env.where} ({path}); check it with `al env check {name}`"
    )


@env_group.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def env_ls(as_json: bool) -> None:
    """List the environments."""
    rows = [_env_row(name) for name in environments.names()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no environments; add one with `al env add NAME --host HOST`")
        return
    from rich.markup import escape

    from llamaherd.api import Column, print_table

    print_table(
        [Column("NAME", keep=True), "SERVER", Column("PORT", justify="right")],
        (
            (row["name"], row["server"], str(row["port"]))
            if not row["error"]
            else (row["name"], f"(invalid: {escape(row['error'])})", "-")
            for row in rows
        ),
    )


def _env_row(name: str) -> dict[str, Any]:
    """Environment ``name`` as ``al env ls --json`` lists it (``error``: why it is unreadable)."""
    try:
        env = environments.load(name)
    except LlamaherdError as exc:
        return {"name": name, "error": str(exc)}
    return {
        "name": name,
        "server": env.where,
        "host": env.host,
        "user": env.user,
        "port": env.port,
        "path": env.base,
        "key": env.key,
        "ssh_options": list(env.ssh_options),
        "python": env.python,
        "file": str(env.file),
        "error": None,
    }


@env_group.command("show")
@click.argument("name")
def env_show(name: str) -> None:
    """Print environment NAME and its file."""
    env = environments.load(name)
    click.echo(f"environment {name} ({env.file})")
    rows = [
        ("host", env.host),
        ("user", env.user),
        ("port", env.port),
        ("key", env.key or "(ssh's defaults)"),
        ("path", env.base + ("" if env.path else " (default)")),
        ("python", env.python),
        *(("ssh option", option) for option in env.ssh_options),
    ]
    for label, value in rows:
        click.echo(f"  {label:<11} {value}")


@env_group.command("rm")
@click.argument("name")
def env_rm(name: str) -> None:
    """Forget environment NAME (the server is left as it is)."""
    path = environments.remove(name)
    click.echo(f"removed environment {name} ({path}); nothing changed on the server")


@env_group.command("check")
@click.argument("name")
def env_check(name: str) -> None:
    """Check that NAME's server can take a push: SSH, Python, disk, service manager."""
    from llamaherd_deploy.push import describe_service, server_problems
    from llamaherd_deploy.ssh import Connection

    env = environments.load(name)
    with Connection(env) as conn:
        click.echo(f"✓ ssh {env.user}@{env.host} port {env.port}")
        info = conn.call("probe", {"base": env.base, "nonce": "check"})
    checks = server_problems(info)
    for ok, line in checks:
        click.echo(f"{'✓' if ok else '✗'} {line}")
    if all(ok for ok, _ in checks):
        click.echo(f"✓ service: {describe_service(info)}")
        deployed, running = info.get("deployed"), info.get("scheduler")
        if deployed:
            state = f"runs (pid {running['pid']}, {running['url']})" if running else "is stopped"
            click.echo(f"  deployed: release {deployed['release']}; the scheduler {state}")
        else:
            click.echo(f"  deployed: nothing yet; `al push {name}` deploys the project")
    failed = [line for ok, line in checks if not ok]
    if failed:
        raise CommandFailed(f"{env.where}: {len(failed)} check(s) failed (marked ✗ above)")


# --------------------------------------------------------------------------- al push


@click.command("push")
@click.argument("targets", nargs=-1, metavar="[ENV] [AGENT]")
@click.option("-E", "--env", "env_name", metavar="NAME", help="The environment (then AGENT only).")
@click.option(
    "--dry-run", is_flag=True, help="Show what would change on the server; change nothing."
)
@click.option("--creds-only", is_flag=True, help="Push only the credentials.")
@click.option("--files-only", is_flag=True, help="Push only the project's files.")
@click.option(
    "--wheels",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Install from the .whl files in this directory only (no package index on the server).",
)
@click.option("--with", "extra", multiple=True, metavar="DIST",
              help="Also install this distribution on the server (repeatable).")  # fmt: skip
@click.option("--grace", type=float, default=300.0, show_default=True,
              help="Seconds active runs get to finish when the scheduler restarts.")  # fmt: skip
@click.option("--start-timeout", type=float, default=120.0, show_default=True,
              help="Seconds the new scheduler gets to come up before the push rolls back.")  # fmt: skip
@click.option(
    "--force-install", is_flag=True, help="Build a fresh venv even if the packages are unchanged."
)
@pass_app
def push_command(
    app: AppContext,
    targets: tuple[str, ...],
    env_name: str | None,
    dry_run: bool,
    creds_only: bool,
    files_only: bool,
    wheels: Path | None,
    extra: tuple[str, ...],
    grace: float,
    start_timeout: float,
    force_install: bool,
) -> None:
    """Deploy the project (or only AGENT) to environment ENV over SSH and (re)start its
    scheduler there.

    ENV defaults to --env, then $AL_ENV. Installs llamaherd and exactly the plugins the
    project uses into a venv on the server, syncs the files git would commit (never .al/) and
    only the credentials the project references, validates the result on the server, then
    restarts the scheduler gracefully (a systemd unit where systemd runs, else a supervised
    process). A failed step leaves the running scheduler as it was.
    """
    from llamaherd_deploy.push import Options, Push

    if creds_only and files_only:
        raise LlamaherdError("--creds-only and --files-only exclude each other")
    project = app.project
    name, agent = _targets(targets, env_name, set(project.agents))
    options = Options(
        dry_run=dry_run,
        creds_only=creds_only,
        files_only=files_only,
        wheels=wheels,
        extra=extra,
        grace=grace,
        start_timeout=start_timeout,
        force_install=force_install,
    )
    Push(project, app.registry, environments.load(name), agent, options, click.echo).run()


def _targets(
    args: tuple[str, ...], explicit: str | None, agents: set[str]
) -> tuple[str, str | None]:
    """(environment, agent) from ``al push [ENV] [AGENT]``, ``--env`` and ``$AL_ENV``."""
    fallback = explicit or os.environ.get("AL_ENV")
    if explicit or len(args) == 2:
        if len(args) > (1 if explicit else 2):
            raise LlamaherdError("al push takes [ENV] [AGENT]: too many arguments")
        return (explicit, args[0] if args else None) if explicit else (args[0], args[1])
    if not args:
        if fallback:
            return fallback, None
        known = ", ".join(environments.names()) or "none yet: `al env add NAME --host HOST`"
        raise LlamaherdError(f"al push needs an environment: al push ENV (known: {known})")
    name = args[0]
    is_env = environments.NAME.fullmatch(name) is not None and environments.exists(name)
    if is_env and name in agents:
        raise LlamaherdError(
            f"{name!r} is both an environment and an agent: say `al push --env {name}` or "
            f"`al push ENV {name}`"
        )
    if is_env or name not in agents:
        return name, None
    if not fallback:
        raise LlamaherdError(f"al push {name}: to which environment? `al push ENV {name}`")
    return fallback, name


# --------------------------------------------------------------------------- al service


@click.group("service")
def service_group() -> None:
    """Keep this project's scheduler running on this host: a systemd unit where systemd runs,
    else a supervisor process (`al push` uses these on the server)."""


def _service(app: AppContext):  # -> service.Service, imported lazily
    from llamaherd_deploy.service import Service

    return Service.of(app)


def _grace(command):
    return click.option(
        "--grace",
        type=float,
        default=environments.DEFAULT_GRACE,
        show_default=True,
        help="Seconds active runs get to finish when the scheduler stops.",
    )(command)


def _timeout(default: float):
    return click.option(
        "--timeout",
        type=float,
        default=default,
        show_default=True,
        help="Seconds to wait for the scheduler.",
    )


@service_group.command("install")
@_grace
@click.option("--now", is_flag=True, help="Start it too.")
@click.option("--print", "print_only", is_flag=True, help="Print the unit; install nothing.")
@pass_app
def service_install(app: AppContext, grace: float, now: bool, print_only: bool) -> None:
    """Write and enable the systemd unit (as root: a system unit; otherwise a user unit, which
    needs lingering: `sudo loginctl enable-linger USER`)."""
    service = _service(app)
    if print_only:
        click.echo(service.unit(grace), nl=False)
        return
    changed = service.install(grace)
    click.echo(f"{'installed' if changed else 'unchanged'}: {service.unit_path} (enabled)")
    if now:
        service.start(grace, 120.0, click.echo)


@service_group.command("uninstall")
@pass_app
def service_uninstall(app: AppContext) -> None:
    """Stop the scheduler and remove the systemd unit."""
    service = _service(app)
    if not service.installed():
        raise LlamaherdError(f"no unit {service.name}.service is installed here")
    service.stop(360.0, click.echo)
    service.systemctl("disable", f"{service.name}.service", check=False)
    service.unit_path.unlink()
    service.systemctl("daemon-reload")
    click.echo(f"removed {service.unit_path}")


@service_group.command("start")
@_grace
@_timeout(120.0)
@pass_app
def service_start(app: AppContext, grace: float, timeout: float) -> None:
    """Start the scheduler (installing or refreshing the systemd unit where systemd runs) and
    wait until it answers."""
    _service(app).start(grace, timeout, click.echo)


@service_group.command("stop")
@_timeout(360.0)
@pass_app
def service_stop(app: AppContext, timeout: float) -> None:
    """Stop the scheduler gracefully, however it was started."""
    if not _service(app).stop(timeout, click.echo):
        click.echo("the scheduler was not running")


@service_group.command("restart")
@_grace
@_timeout(360.0)
@pass_app
def service_restart(app: AppContext, grace: float, timeout: float) -> None:
    """Stop the scheduler gracefully, then start it."""
    service = _service(app)
    service.stop(timeout, click.echo)
    service.start(grace, timeout, click.echo)


@service_group.command("status")
@pass_app
def service_status(app: AppContext) -> None:
    """How the scheduler is kept running here, and whether it runs."""
    from llamaherd.api import scheduler_info

    service = _service(app)
    click.echo(f"service {service.name}: {service.mode} ({service.why})")
    if service.installed():
        state = service.unit_state()
        click.echo(
            f"unit: {service.unit_path} ({state.get('ActiveState')}/{state.get('SubState')})"
        )
    supervisor = service.supervisor_pid()
    if supervisor:
        click.echo(f"supervisor: pid {supervisor}")
    info = scheduler_info(service.state)
    click.echo(f"scheduler: pid {info['pid']}, {info['url']}" if info else "scheduler: not running")

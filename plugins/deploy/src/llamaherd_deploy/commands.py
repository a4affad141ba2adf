"""The commands: ``al env`` (named environments), ``al push``, ``al service`` (on a server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from llamaherd.api import (
    AppContext,
    CommandFailed,
    ConfigError,
    LlamaherdError,
    environment_option,
    pass_app,
)
from llamaherd_deploy import environments

# --------------------------------------------------------------------------- al env

# Our earlier names, kept: `al env ls` is `al env list`.
ALIASES = {"ls": "list"}


class EnvGroup(click.Group):
    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, ALIASES.get(cmd_name, cmd_name))


@click.group("env", cls=EnvGroup)
def env_group() -> None:
    """Environments (~/.action-llama/environments/NAME.toml): settings layered over a project
    (`-E NAME`, or `al env set NAME` to bind one), and the servers it is deployed to."""


@env_group.command("init")
@click.argument("name")
@click.option(
    "-t",
    "--type",
    "kind",
    type=click.Choice(["server", "config"]),
    default="server",
    show_default=True,
    help="server: a [server] table to fill in (where `al push` deploys); config: only "
    "settings layered over the project.",
)
def env_init(name: str, kind: str) -> None:
    """Create environment NAME's file, to edit (as Action Llama's `al env init`)."""
    environments.check_name(name)
    path = environments.path_of(name)
    if path.exists():
        raise LlamaherdError(
            f"environment {name!r} already exists ({path}); edit it, or `al env rm {name}`"
        )
    skeleton: dict = {}
    if kind == "server":
        skeleton["server"] = {
            "host": environments.PLACEHOLDER,
            "user": environments.DEFAULT_USER,
            "port": environments.DEFAULT_PORT,
            "basePath": environments.ROOT_BASE,
        }
    environments.write(name, skeleton)
    click.echo(f"created {kind} environment {name} at {path}; edit it to configure it")


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
@click.option(
    "--expose",
    is_flag=True,
    help="The deployed scheduler listens on every interface (its [gateway] bind = 0.0.0.0).",
)
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
    expose: bool,
    force: bool,
) -> None:
    """Add environment NAME: where `al push NAME` deploys."""
    environments.check_name(name)
    environments.check_host(host)
    environments.check_user(user)
    if base is not None and not (base.startswith("/") or base.startswith("~/")):
        raise LlamaherdError(f"--path {base}: expected an absolute path or ~/... on the server")
    for option in ssh_options:
        if "=" not in option:
            raise LlamaherdError(f"--ssh-option {option}: expected KEY=VALUE")
    if key and not Path(key).expanduser().is_file():
        click.echo(f"warning: --key {key}: no such file here", err=True)
    # Replacing keeps the file's settings over projects: only its [server] is this command's.
    layers = environments.read(name) if force and environments.exists(name) else {}
    env = environments.Environment(
        name=name,
        host=host,
        user=user,
        port=port,
        key=str(Path(key).expanduser().absolute()) if key else None,
        path=base,
        ssh_options=ssh_options,
        python=python,
        expose=expose,
        layers={k: v for k, v in layers.items() if k != "server"},
    )
    path = environments.save(env, replace=force)
    click.echo(
        f"added environment {name}: {env.where} ({path}); check it with `al env check {name}`"
    )


@env_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def env_list(as_json: bool) -> None:
    """List the environments (also `al env ls`)."""
    rows = [environment_row(name) for name in environments.names()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(
            "no environments; create one with `al env init NAME` or `al env add NAME --host HOST`"
        )
        return
    from llamaherd.api import Column, print_table
    from llamaherd.api import escape_markup as escape

    def cells(row: dict[str, Any]) -> tuple[str, str, str]:
        if row["error"]:
            return row["name"], f"(invalid: {escape(row['error'])})", "-"
        if row["type"] == "config":
            return row["name"], "(settings only, no server)", "-"
        return row["name"], row["server"], str(row["port"])

    print_table(
        [Column("NAME", keep=True), "SERVER", Column("PORT", justify="right")], map(cells, rows)
    )


def environment_row(name: str) -> dict[str, Any]:
    """Environment ``name`` as ``al env list --json`` lists it: ``type`` server, config
    (settings only) or invalid (``error`` says why)."""
    row: dict[str, Any] = {"name": name, "file": str(environments.path_of(name)), "error": None}
    try:
        data = environments.read(name)
        if "server" not in data:
            return {**row, "type": "config"}
        env = environments.parse(name, data, row["file"])
    except LlamaherdError as exc:
        return {**row, "type": "invalid", "error": str(exc)}
    return {
        **row,
        "type": "server",
        "server": env.where,
        "host": env.host,
        "user": env.user,
        "port": env.port,
        "path": env.base,
        "key": env.key,
        "ssh_options": list(env.ssh_options),
        "python": env.python,
        "provider": env.extra.get("provider"),
    }


def bound_name(app: AppContext, name: str | None, command: str) -> str:
    """``name``, else the environment this project is bound to (-E, ``$AL_ENV``,
    ``.env.toml``); an error saying how to name one when there is none."""
    if name is not None:
        return name
    binding = app.binding()
    if binding is None:
        raise LlamaherdError(
            f"which environment? `al env {command} NAME` (or bind the project: `al env set NAME`)"
        )
    return str(binding.name)


@env_group.command("show")
@click.argument("name", required=False)
@pass_app
def env_show(app: AppContext, name: str | None) -> None:
    """Print environment NAME (default: the project's environment): its server and the
    settings it layers over projects."""
    name = bound_name(app, name, "show")
    data = environments.read(name)
    path = environments.path_of(name)
    click.echo(f"environment {name} ({path})")
    problem = None
    try:
        env = environments.parse(name, data, str(path)) if "server" in data else None
    except ConfigError as exc:  # a server to fill in (as `al env init` leaves it): shown as is
        problem, env = exc, None
        click.echo("  " + "\n  ".join(environments.dumps({"server": data["server"]}).splitlines()))
    if env is not None:
        rows = [
            ("host", env.host),
            ("user", env.user),
            ("port", env.port),
            ("key", env.key or "(ssh's defaults)"),
            ("path", env.base + ("" if env.path else " (default)")),
            ("python", env.python),
            ("expose", "yes: [gateway] bind = 0.0.0.0 there" if env.expose else "no"),
            *(("ssh option", option) for option in env.ssh_options),
            *((key, value) for key, value in env.extra.items()),
        ]
        for label, value in rows:
            click.echo(f"  {label:<11} {value}")
    layers = {k: v for k, v in data.items() if k != "server"}
    if layers:
        click.echo("settings over the project's config.toml and .env.toml:")
        for line in environments.dumps(layers).splitlines():
            click.echo(f"  {line}" if line else "")
    elif "server" not in data:
        click.echo("  (empty: add settings to layer over projects, or a [server] table)")
    if problem is not None:
        raise problem


@env_group.command("set")
@click.argument("name", required=False)
@pass_app
def env_set(app: AppContext, name: str | None) -> None:
    """Bind this project to environment NAME (`environment = "NAME"` in .env.toml: its
    settings apply, and a deployed one's scheduler is the one `al stat`, `al run`... talk
    to); without NAME, unbind it."""
    from llamaherd.api import bind_environment

    root = app.root
    if root is None:
        raise LlamaherdError("not inside a project (no config.toml or agents/); use --project DIR")
    if name is not None:
        environments.check_name(name)
        if not environments.exists(name):
            click.echo(
                f"warning: no environment {name!r} yet: `al env init {name}` creates it", err=True
            )
    path = bind_environment(root, name)
    if name is None:
        click.echo(f"unbound: {path} names no environment; commands act on this project here")
    else:
        click.echo(f"bound this project to environment {name} ({path})")


@env_group.command("rm")
@click.argument("name")
def env_rm(name: str) -> None:
    """Forget environment NAME (the server is left as it is; `al env deprov` deletes one
    `al env prov` made)."""
    path = environments.remove(name)
    from llamaherd_deploy.provision import known_hosts_file

    known_hosts_file(name).unlink(missing_ok=True)
    click.echo(f"removed environment {name} ({path}); nothing changed on the server")


@env_group.command("check")
@click.argument("name", required=False)
@pass_app
def env_check(app: AppContext, name: str | None) -> None:
    """Check that NAME's server (default: the project's environment's) can take a push: SSH,
    Python, disk, service manager."""
    from llamaherd_deploy.push import describe_service, server_problems
    from llamaherd_deploy.ssh import Connection

    name = bound_name(app, name, "check")
    env = environments.load(name)
    with Connection(env) as conn:
        click.echo(f"✓ ssh {env.user}@{env.host} port {env.port}")
        info = conn.call("probe", {"base": env.base, "nonce": "check"})
    checks = server_problems(info)
    state = info.get("provisioning")
    if state:
        checks.insert(0, (state != "running" and not state.startswith("failed"),
                          f"first boot (cloud-init): {state}"))  # fmt: skip
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


@env_group.command("logs")
@click.argument("name", required=False)
@click.option("-n", "--lines", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many of the last lines.")  # fmt: skip
@click.option("-f", "--follow", is_flag=True, help="Keep printing lines as they come.")
@pass_app
def env_logs(app: AppContext, name: str | None, lines: int, follow: bool) -> None:
    """The deployed scheduler's service log on NAME's server (default: the project's
    environment): its systemd journal, or the supervisor's log file."""
    from llamaherd_deploy.ssh import Connection

    env = environments.load(bound_name(app, name, "logs"))
    with Connection(env) as conn:
        code = conn.stream("logs", {"base": env.base, "lines": lines, "follow": follow}, click.echo)
    if code != 0 and not follow:
        raise CommandFailed(f"{env.where}: reading the log failed (exit status {code})")


@env_group.command("prov")
@click.argument("name", required=False)
@click.option("--provider", type=click.Choice(["hetzner", "vultr"]),
              help="The cloud (asked in a terminal when not given).")  # fmt: skip
@click.option("--region", help="Hetzner location or Vultr region [default: fsn1 / ewr].")
@click.option("--size", "--type", "--plan", "size",
              help="Server type (Hetzner) or plan (Vultr) [default: the cheapest with 2 CPUs "
              "and 2 GB in the region].")  # fmt: skip
@click.option("--image", help="Hetzner image or Vultr os_id [default: ubuntu-24.04 / 2284].")
@click.option("--ssh-port", type=click.IntRange(1, 65535), default=22, show_default=True)
@click.option("--gateway-port", type=click.IntRange(1, 65535), default=8080, show_default=True,
              help="The port the firewall opens for webhooks (and the deployed [gateway] port).")  # fmt: skip
@click.option("--user", default=environments.DEFAULT_USER, show_default=True,
              help="The user `al push` deploys as (created on the server when not root).")  # fmt: skip
@click.option("--path", "base", help="Deployment directory [default: as `al env add`].")
@click.option("--ssh-option", "ssh_options", multiple=True, metavar="KEY=VALUE",
              help="Extra `ssh -o` option, repeatable.")  # fmt: skip
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds the new server gets to run, answer SSH and finish its first boot.")  # fmt: skip
@click.option("--push", "push_after", is_flag=True,
              help="Then deploy this project there (`al push NAME`).")  # fmt: skip
@pass_app
def env_prov(
    app: AppContext,
    name: str | None,
    provider: str | None,
    region: str | None,
    size: str | None,
    image: str | None,
    ssh_port: int,
    gateway_port: int,
    user: str,
    base: str | None,
    ssh_options: tuple[str, ...],
    timeout: float,
    push_after: bool,
) -> None:
    """Create a server on Hetzner or Vultr and record it as environment NAME: a firewall open
    to SSH and the gateway port only, a first boot (cloud-init) that prepares what `al push`
    needs, then `al push NAME` deploys there. What it creates is recorded as it goes, so
    `al env deprov NAME` deletes it, and only it."""
    from llamaherd_deploy.provision import Provision, Request, cloud_of

    interactive = sys.stdin.isatty()
    if name is None:
        if not interactive:
            raise LlamaherdError("al env prov needs a NAME for the environment")
        name = click.prompt("Environment name").strip()
    environments.check_name(name)
    environments.check_user(user)
    if environments.exists(name):
        raise LlamaherdError(
            f"environment {name!r} exists already ({environments.path_of(name)}): "
            f"`al env check {name}` looks at it, `al env deprov {name}` deletes one made here"
        )
    if provider is None:
        if not interactive:
            raise LlamaherdError("which cloud? --provider hetzner or --provider vultr")
        provider = click.prompt("Provider", type=click.Choice(["hetzner", "vultr"]))
    if base is not None and not (base.startswith("/") or base.startswith("~/")):
        raise LlamaherdError(f"--path {base}: expected an absolute path or ~/... on the server")
    if ssh_port == gateway_port:
        raise LlamaherdError(f"--gateway-port {gateway_port}: that is the SSH port")
    request = Request(
        name=name, provider=provider, region=region, size=size, image=image,
        ssh_port=ssh_port, gateway_port=gateway_port, user=user, path=base,
        ssh_options=ssh_options, timeout=timeout,
    )  # fmt: skip
    env = Provision(request, cloud_of(provider), click.echo).run()
    click.echo(
        f"environment {name} is ready: {env.where}, gateway http://{env.host}:{gateway_port} "
        f"({env.file})"
    )
    if push_after:
        from llamaherd_deploy.push import Options, Push

        Push(app.project, app.registry, env, None, Options(), click.echo).run()
    else:
        click.echo(f"next: `al push {name}` (or `al env set {name}`, then `al push`)")


@env_group.command("deprov")
@click.argument("name")
@pass_app
def env_deprov(app: AppContext, name: str) -> None:
    """Delete the server, firewall and SSH key `al env prov NAME` created (nothing else:
    each is checked to be that one first), then the environment; a project bound to it is
    unbound."""
    from llamaherd.api import bind_environment, read_env_toml
    from llamaherd_deploy.provision import deprovision

    deprovision(environments.load(name), click.echo)
    click.echo(f"removed environment {name} ({environments.path_of(name)})")
    root = app.root
    if root is not None and read_env_toml(root).get("environment") == name:
        bind_environment(root, None)
        click.echo(f"unbound this project from {name} (.env.toml)")


# --------------------------------------------------------------------------- al push


@click.command("push")
@click.argument("targets", nargs=-1, metavar="[ENV] [AGENT]")
@environment_option
@click.option(
    "--dry-run", is_flag=True, help="Show what would change on the server; change nothing."
)
@click.option("--creds-only", is_flag=True, help="Push only the credentials.")
@click.option("--files-only", "--skip-creds", "--no-creds", "files_only", is_flag=True,
              help="Push only the project's files (the server keeps its credentials).")  # fmt: skip
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
@click.option(
    "-H", "--headless", is_flag=True, help="Accepted for Action Llama users: never prompts."
)
@pass_app
def push_command(
    app: AppContext,
    targets: tuple[str, ...],
    dry_run: bool,
    creds_only: bool,
    files_only: bool,
    wheels: Path | None,
    extra: tuple[str, ...],
    grace: float,
    start_timeout: float,
    force_install: bool,
    headless: bool,
) -> None:
    """Deploy the project (or only AGENT) to environment ENV over SSH and (re)start its
    scheduler there.

    ENV defaults to -E/--env, then $AL_ENV, then the project's .env.toml binding (`al env
    set`). Installs llamaherd and exactly the plugins the project uses into a venv on the
    server, syncs the files git would commit and those under shared/ (never .al/), the
    settings .env.toml and the environment layer over config.toml, and only the credentials
    the project references; validates the result on the server, then restarts the scheduler
    gracefully (a systemd unit where systemd runs, else a supervised process). A failed step
    leaves the running scheduler as it was.
    """
    from llamaherd_deploy.push import Options, Push

    if creds_only and files_only:
        raise LlamaherdError("--creds-only and --files-only exclude each other")
    name, agent = _targets(targets, app)
    app.environment = name  # the project is checked with that environment's layers
    project = app.project
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


def _targets(args: tuple[str, ...], app: AppContext) -> tuple[str, str | None]:
    """(environment, agent) from ``al push [ENV] [AGENT]`` and ``-E``/``$AL_ENV``/the
    project's ``.env.toml`` binding."""
    explicit = app.environment
    if explicit or len(args) == 2:
        if len(args) > (1 if explicit else 2):
            raise LlamaherdError("al push takes [ENV] [AGENT]: too many arguments")
        return (explicit, args[0] if args else None) if explicit else (args[0], args[1])
    binding = app.binding()
    fallback = binding.name if binding is not None else None
    if not args:
        if fallback:
            return fallback, None
        known = ", ".join(environments.names()) or "none yet: `al env add NAME --host HOST`"
        raise LlamaherdError(f"al push needs an environment: al push ENV (known: {known})")
    name = args[0]
    agents = _agent_names(app)
    is_env = environments.is_name(name) and environments.exists(name)
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


def _agent_names(app: AppContext) -> set[str]:
    """The project's agents, without loading it (its environment is not known yet)."""
    root = app.root
    if root is None:
        return set()
    return {p.parent.name for p in (root / "agents").glob("*/SKILL.md")}


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

"""The ``al`` command: core's subcommands plus every plugin's ``register_commands``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click


class AppContext:
    """Shared by every subcommand: the project directory and lazily loaded project/plugins."""

    def __init__(self, project_dir: Path | None):
        self.project_dir = project_dir
        self.environment: str | None = None  # -E/--env NAME (``environment_option``)
        self._project: Any = None

    @property
    def project(self) -> Any:
        if self._project is None:
            from llamaherd.environments import load_project

            self._project = load_project(self.project_dir, self.environment)
        return self._project

    @property
    def root(self) -> Path | None:
        """The project's directory without loading the project (None outside of one)."""
        if self._project is not None:
            return self._project.root
        root = self.project_dir
        if root is None:
            here = Path.cwd().resolve()
            # As ``llamaherd.project.find_root``, without importing the project's parsers.
            root = next(
                (
                    d
                    for d in (here, *here.parents)
                    if (d / "config.toml").is_file() or (d / "agents").is_dir()
                ),
                None,
            )
        return None if root is None else Path(root).resolve()

    @property
    def state_dir(self) -> Path | None:
        """The project's ``.al`` without loading the project (None outside of one): where the
        read commands find a running scheduler to ask."""
        root = self.root
        return None if root is None else root / ".al"

    def binding(self) -> Any:
        """The command's environment (``llamaherd.environments.Binding``): ``-E``, else
        ``$AL_ENV``, else the project's ``.env.toml`` binding; None without one."""
        from llamaherd.environments import resolve

        return resolve(self.environment, self.root)

    def deployed_environment(self) -> Any:
        """``binding()`` when its environment file names a server (``[server]``), else None."""
        from llamaherd.environments import is_deployed_file

        binding = self.binding()
        return binding if binding is not None and is_deployed_file(binding.name) else None

    def remote(self) -> Any:
        """A ``ControlClient`` of the scheduler deployed as the command's environment, when it
        names one a plugin reaches; None when the command acts here (no environment, or one
        that only layers config over the project)."""
        from llamaherd.client import ControlClient

        binding = self.binding()
        return None if binding is None else ControlClient.for_environment(binding)

    @property
    def registry(self) -> Any:
        from llamaherd.plugins import registry

        return registry()


class ErrorHandlingGroup(click.Group):
    """Turns LlamaherdError into one line on stderr and its exit code, never a traceback:
    2 for a usage or config error (as click's own usage errors), 1 for a ``CommandFailed``.

    Lazy: with a ``manifest`` (``llamaherd.command_manifest``) it lists every command from it
    and loads only what the command asked for provides; without one, everything is loaded
    (``load_all``) as before."""

    manifest: dict[str, Any] | None = None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # Imported here: `al --help` does not load the types module.
            from llamaherd.errors import LlamaherdError

            if not isinstance(exc, LlamaherdError):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        listed = self.manifest["commands"] if self.manifest else {}
        return sorted({*self.commands, *listed})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = self.manifest["commands"].get(cmd_name) if self.manifest else None
        if entry is not None:
            self._provide(cmd_name, entry)
        return super().get_command(ctx, cmd_name)

    def _provide(self, name: str, entry: dict[str, Any]) -> None:
        from llamaherd.command_manifest import provide

        provided = self.__dict__.setdefault("_provided", set())
        for provider in entry["from"]:
            if tuple(provider) not in provided:
                provided.add(tuple(provider))
                provide(self, provider)
        if name in self.commands:
            add_project_option(self.commands[name])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands, told from the manifest for those not loaded."""
        from llamaherd.command_manifest import stand_in

        listed = self.manifest["commands"] if self.manifest else {}
        commands = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or stand_in(name, listed[name])
            if not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            rows = [(name, command.get_short_help_str(limit)) for name, command in commands]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """An unknown subcommand: everything is loaded (the manifest may be behind a plugin
        just changed) and the manifest written afresh; still unknown, when a first-party
        plugin provides it, the error names that plugin."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            if self.manifest is not None:
                self.manifest = None
                load_all(self)
                return self.resolve_command(ctx, args)
            from llamaherd.plugins import PROVIDED_BY

            dist = PROVIDED_BY.get(("commands", args[0])) if args else None
            if dist:
                from llamaherd.install import needs

                ctx.fail(f"`al {args[0]}` {needs(dist)}")
            raise


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-p",
    "--project",
    "project_dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="AL_PROJECT",
    help="Project directory (default: found by walking up from the current directory).",
)
@click.version_option(package_name="llamaherd")
@click.pass_context
def cli(ctx: click.Context, project_dir: Path | None) -> None:
    """llamaherd: run autonomous LLM agents on a schedule or on events."""
    ctx.obj = AppContext(project_dir)


pass_app = click.make_pass_decorator(AppContext)


@cli.group()
def setup() -> None:
    """Prepare a runtime on this machine (plugins add one subcommand each)."""


def _set_project(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    app = ctx.find_object(AppContext)
    if value is not None and app is not None:
        app.project_dir = value


def add_project_option(command: click.Command) -> None:
    """Give ``command`` (and every command under a group) Action Llama's ``-p/--project DIR``,
    as well as ``al --project DIR``; a name the command already uses is left to it (``al schema
    --project`` is a flag)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_project_option(sub)
        return
    taken = {name for param in command.params for name in param.opts + param.secondary_opts}
    names = [name for name in ("-p", "--project") if name not in taken]
    if not names or any(param.name == "project_dir_option" for param in command.params):
        return
    command.params.append(
        click.Option(
            [*names, "project_dir_option"],
            type=click.Path(file_okay=False, path_type=Path),
            expose_value=False,
            callback=_set_project,
            help="Project directory (as `al --project DIR`).",
        )
    )


def _set_environment(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    app = ctx.find_object(AppContext)
    if value is not None and app is not None:
        app.environment = value


def environment_option(command: Any) -> Any:
    """Action Llama's ``-E/--env NAME`` (also ``$AL_ENV``, then the project's ``.env.toml``
    binding): the project's config gets the environment's layers, and a command that talks to
    a scheduler talks to the one deployed there when the environment has a ``[server]``
    (``llamaherd.environments``). The name lands in ``AppContext.environment``."""
    return click.option(
        "-E",
        "--env",
        "environment_option",
        metavar="NAME",
        expose_value=False,
        callback=_set_environment,
        help="Environment NAME (~/.action-llama/environments/NAME.toml; default: $AL_ENV, "
        "then .env.toml's binding): its settings layer over config.toml, and a deployed one's "
        "scheduler is the one this command talks to.",
    )(command)


def load_all(group: click.Group) -> None:
    """Every core command module and every plugin's ``register_commands`` into ``group``,
    recording who provided each command; then the manifest is written for the next runs."""
    import importlib
    from functools import partial

    from llamaherd import command_manifest
    from llamaherd.commands import COMMAND_MODULES
    from llamaherd.plugins import get_manager

    providers: dict[str, list[list[str]]] = {}
    lazy = True  # every provider a module the manifest can name
    for module_name in COMMAND_MODULES:
        register = importlib.import_module(module_name).register
        _record(group, providers, [command_manifest.CORE, module_name], partial(register, group))
    for impl in reversed(get_manager().pm.hook.register_commands.get_hookimpls()):
        module = getattr(impl.plugin, "__name__", None)
        lazy = lazy and isinstance(module, str) and hasattr(impl.plugin, "register_commands")
        try:
            _record(group, providers, ["plugin", str(module)], partial(impl.function, cli=group))
        except Exception as exc:  # one plugin's broken commands must not take the CLI down
            click.echo(
                f"warning: plugin {impl.plugin_name!r} failed in register_commands: "
                f"{type(exc).__name__}: {exc}",
                err=True,
            )
    add_project_option(group)
    if lazy:
        tops = {"llamaherd", *(p[1].split(".")[0] for each in providers.values() for p in each)}
        command_manifest.write(
            group, providers, {m for m in sys.modules if m.split(".")[0] in tops}
        )


def _record(
    group: click.Group, providers: dict[str, list[list[str]]], provider: list[str], add: Any
) -> None:
    """``add()``, and ``provider`` noted for each command it added to ``group`` or changed."""

    def shape(command: click.Command) -> tuple[int, tuple[str, ...]]:
        inner = tuple(sorted(command.commands)) if isinstance(command, click.Group) else ()
        return id(command), inner

    before = {name: shape(command) for name, command in group.commands.items()}
    add()
    for name, command in group.commands.items():
        if before.get(name) != shape(command):
            providers.setdefault(name, []).append(provider)


def main() -> None:
    from llamaherd import command_manifest

    manifest = command_manifest.load()
    if manifest is None:
        load_all(cli)
    else:
        cli.manifest = manifest
    cli()

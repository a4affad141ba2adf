"""Project commands: plugins, validate, schema, new, add."""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, environment_option, pass_app
from llamaherd.errors import CommandFailed, ConfigError, LlamaherdError

# --------------------------------------------------------------------------- al plugins


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include core's built-in plugins.")
def plugins_command(as_json: bool, show_all: bool) -> None:
    """List installed plugins, their versions and what each registers."""
    from llamaherd.plugins import get_manager

    rows = [info.__dict__ for info in get_manager().describe(show_all)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.markup import escape

    from llamaherd.tables import Column, print_table

    print_table(
        [Column("NAME", keep=True), "DISTRIBUTION", "VERSION", "REGISTERS"],
        (
            (row["name"], row["distribution"] or "", row["version"] or "", escape(_registers(row)))
            for row in rows
        ),
    )
    _not_installed({row["distribution"] for row in rows})


def _not_installed(installed: set[str]) -> None:
    """The distributions of the checkout (or wheelhouse) llamaherd came from that are not
    installed, each with the command that installs it."""
    from llamaherd.install import available, installed_from

    missing = {name: command for name, command in available().items() if name not in installed}
    if not missing:
        return
    click.echo(f"\nnot installed, available from {installed_from().path}:")
    width = max(map(len, missing))
    for name, command in sorted(missing.items()):
        click.echo(f"  {name:<{width}}  {command}")


def _registers(row: dict[str, Any]) -> str:
    """Registered objects, then the other hooks a plugin implements (commands, routes, ...)."""
    from llamaherd.plugins import KINDS

    if row["error"]:
        return f"failed to load: {row['error']}"
    extra = [hook.removeprefix("register_") for hook in row["hooks"] if hook not in KINDS]
    refused = [f"REFUSED {reason}" for reason in row["refused"]]
    return ", ".join([*row["registers"], *extra, *refused]) or "registers nothing"


# --------------------------------------------------------------------------- al validate / schema


@click.command("validate")
@click.argument("agents", nargs=-1)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the findings as JSON (file, key, message, severity).",
)
@environment_option
@pass_app
def validate_command(app: AppContext, agents: tuple[str, ...], as_json: bool) -> None:
    """Check the project and agent configs; exit 2 on any error.

    With AGENT names, check only those agents (and the project config). With -E NAME, the
    project as environment NAME's settings make it.
    """
    from llamaherd.schema import Problem, validate_project

    try:
        project = _load(app)
    except ConfigError as exc:
        if not as_json:
            raise
        problems = [Problem(exc.file, exc.key, exc.message)]
        _print_findings(problems, [])
        raise SystemExit(2) from None
    problems = validate_project(project, app.registry, agents or None)
    problems += _running_scheduler(project)
    broken = {p.agent for p in problems if p.agent}  # includes agents that failed to parse
    for name in agents:
        if name not in broken:
            project.agent(name)  # an unknown name is one clear error
    names = list(agents) or sorted(set(project.agents) | broken)
    if as_json:
        _print_findings(problems, names)
    else:
        for problem in problems:
            if problem.agent is None:
                click.echo(str(problem))
        for name in names:
            own = [p for p in problems if p.agent == name]
            for problem in own:
                click.echo(str(problem))
            if not any(p.is_error for p in own):
                click.echo(f"ok  agents/{name}")
    if any(p.is_error for p in problems):
        raise SystemExit(2)


def _running_scheduler(project: Any) -> list[Any]:
    """Warnings about the scheduler running this project here: plugins installed since it
    started (it knows none of their keys: restart it), and its refusal of the files on disk."""
    from llamaherd.local import scheduler_info
    from llamaherd.plugins import installed_plugins
    from llamaherd.schema import Problem

    info = scheduler_info(project.state_dir)
    if not info or "plugins" not in info:
        return []
    subject = f"scheduler pid {info.get('pid', '?')}"
    found = []
    new = sorted(installed_plugins() - set(info["plugins"]))
    if new:
        message = (
            f"plugin(s) {', '.join(new)} installed after it started: restart it "
            "(`al stop && al start`) to use them"
        )
        found.append(Problem(subject, "", message, "warning"))
    for refusal in info.get("config_errors") or []:
        found.append(Problem(subject, "", f"refused the config on disk: {refusal}", "warning"))
    return found


def _print_findings(problems: list[Any], agents: list[str]) -> None:
    """``al validate --json``: whether it passed, each finding, and each agent's verdict."""
    failed = {p.agent for p in problems if p.is_error}
    found = {
        "ok": not any(p.is_error for p in problems),
        "findings": [
            {
                "file": p.file,
                "key": p.key,
                "message": p.message,
                "severity": p.severity,
                "agent": p.agent,
            }
            for p in problems
        ],
        "agents": [{"agent": name, "ok": name not in failed} for name in agents],
    }
    click.echo(json.dumps(found, indent=2))


def _load(app: AppContext) -> Any:
    """The project, with a broken root config.toml reported relative to the cwd."""
    try:
        return app.project
    except ConfigError as exc:
        if not Path(exc.file).is_file():
            raise
        raise ConfigError(_relative(Path(exc.file)), exc.key, exc.message) from None


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@click.command("schema")
@click.option("--agent", "which", flag_value="agent", help="Only the agent config.toml schema.")
@click.option(
    "--project", "which", flag_value="project", help="Only the project config.toml schema."
)
@pass_app
def schema_command(app: AppContext, which: str | None) -> None:
    """Print the JSON Schema assembled from core and every installed plugin."""
    from llamaherd.schema import schemas

    assembled = schemas(app.registry)
    documents = {"project": assembled.project_schema(), "agent": assembled.agent_schema()}
    click.echo(json.dumps(documents[which] if which else documents, indent=2))


# --------------------------------------------------------------------------- al new


def _template(*parts: str) -> str:
    from importlib.resources import files

    return files("llamaherd").joinpath("templates", *parts).read_text(encoding="utf-8")


# Plugins the scaffold's comments tell how to install (``$install_<name>``).
SCAFFOLD_PLUGINS = ("anthropic", "cron", "docker")
# Scaffold files: target path -> template path. Dotfiles are stored without the dot so that
# packaging tools never skip them.
NEW_PROJECT_FILES: dict[str, tuple[str, ...]] = {
    "config.toml": ("project", "config.toml"),
    ".gitignore": ("project", "gitignore"),
    "agents/hello/SKILL.md": ("project", "hello", "SKILL.md"),
    "agents/hello/config.toml": ("project", "hello", "config.toml"),
    "agents/hello/script.toml": ("project", "hello", "script.toml"),
}


@click.command("new")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--interactive/--no-interactive",
    default=None,
    help="Ask for the model provider, model and key (default: when in a terminal).",
)
@click.option("--provider", help="Model provider of the project's model (anthropic, openai, ...).")
@click.option("--model", help="Model name (default: the provider's recommended one).")
def new_command(
    directory: Path, interactive: bool | None, provider: str | None, model: str | None
) -> None:
    """Create a project in DIRECTORY with one example agent that runs offline.

    As Action Llama's `al new`: in a terminal it asks for the model provider, the model and its
    API key; --no-interactive --provider P --model M sets them without asking. The example
    agent keeps the offline `scripted` model, so `al run hello` works at once.
    """
    import getpass
    from string import Template

    from llamaherd import scaffold
    from llamaherd.install import install_command

    if directory.exists() and any(directory.iterdir()):
        raise LlamaherdError(f"{directory}: exists and is not empty; choose a new directory")
    if interactive is None:
        interactive = provider is None and click.get_text_stream("stdin").isatty()
    choice = scaffold.ask_model() if interactive else scaffold.given_model(provider, model)
    key = scaffold.ask_key(choice) if interactive and choice else None
    values = {
        "user": getpass.getuser(),
        "models": scaffold.model_table(choice),
        # The scaffold's comments say how to install what they mention, as `al validate` would.
        **{f"install_{name}": install_command(f"llamaherd-{name}") for name in SCAFFOLD_PLUGINS},
    }
    try:
        for target, template in NEW_PROJECT_FILES.items():
            path = directory / target
            path.parent.mkdir(parents=True, exist_ok=True)
            text = Template(_template(*template)).safe_substitute(values)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:
        where = exc.filename or directory
        raise CommandFailed(f"{where}: cannot create the project: {exc.strerror}") from None
    if key:
        scaffold.store_key(choice, key)
    if choice:
        click.echo(scaffold.summary(choice, directory, stored=bool(key)))
    click.echo(f"created {directory}: cd {directory} && al validate && al run hello")


# --------------------------------------------------------------------------- al add

AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@click.command("add")
@click.argument("source")
@click.option(
    "-a",
    "--agent",
    "-s",
    "--skill",
    "wanted",
    metavar="NAME",
    help="Which skill of a source holding several (its name or folder).",
)
@click.option("--name", help="Agent name (default: the skill's frontmatter name, else its folder).")
@click.option("--force", is_flag=True, help="Replace an existing agent of the same name.")
@click.option(
    "--no-config", "no_config", is_flag=True, help="Accepted for Action Llama users (no prompts)."
)
@click.option(
    "-y",
    "--yes",
    is_flag=True,
    help="Install without asking when the skill's config grants the agent powers (any key "
    "not known to be harmless: run_as, groups, hooks, credentials, ssh hosts and options...); "
    "needed to install such a skill without a terminal.",
)
@pass_app
def add_command(
    app: AppContext,
    source: str,
    wanted: str | None,
    name: str | None,
    force: bool,
    no_config: bool,
    yes: bool,
) -> None:
    """Install a skill as agents/<name>/ from a folder, a git URL or GitHub owner/repo.

    SOURCE#path picks a folder inside it; else every SKILL.md is found (at the root, in
    skills/*/ and agents/*/) and -a NAME picks one. A skill's own config.toml is kept, with
    the model and webhook source names it uses fitted to this project. Every key of its config
    (config.toml and SKILL.md frontmatter) that is not known to be harmless grants the agent a
    power (run_as, groups, hooks, credentials, ssh hosts and options, any key new to
    llamaherd): each is shown, and the skill installed only when you agree (asked in a
    terminal; --yes otherwise: without it and without a terminal nothing is installed, exit 2).
    """
    from llamaherd import skill_sources

    project = _load(app)
    with tempfile.TemporaryDirectory(prefix="al-add-") as tmp:
        fetched = skill_sources.fetch(source, Path(tmp))
        skill = skill_sources.choose(skill_sources.discover(fetched, source), wanted, source)
        name = name or skill.name
        if not AGENT_NAME.match(name):
            raise LlamaherdError(
                f"{name!r} is not a valid agent name (letters, digits, '_', '.', '-'); use --name"
            )
        target = project.root / "agents" / name
        if target.exists() and not force:
            raise LlamaherdError(f"agents/{name} already exists; use --force to replace it")
        recorded = source if fetched.subdir or not skill.where else f"{source}#{skill.where}"
        _confirm_grants(skill.path, recorded, name, yes)
        config = _added_config(app, project, fetched, skill, recorded)
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(skill.path, target, ignore=shutil.ignore_patterns(".git"))
    (target / "config.toml").write_text(config, encoding="utf-8")
    click.echo(f"added agents/{name} from {recorded}")


def _confirm_grants(skill_dir: Path, source: str, name: str, yes: bool) -> None:
    """Say what the skill's config grants the agent (``llamaherd.grants``: every key not known
    to be harmless), and go on only when the user agrees: asked in a terminal, ``--yes``
    otherwise. Someone else's skill must not get run_as, groups, hooks, credentials or a
    command-running ssh option on a warning nobody read."""
    from llamaherd import grants, skill_sources

    try:
        found = grants.grants(skill_sources.skill_config(skill_dir))
    except ConfigError as exc:  # name the source, not our temporary clone
        raise ConfigError(f"{source}: {Path(exc.file).name}", exc.key, exc.message) from None
    if not found:
        return
    click.echo(f"agents/{name} from {source} (review its config.toml and SKILL.md) sets:", err=True)
    for grant in found:
        click.echo(f"  {grant}", err=True)
    if yes:
        return
    if not sys.stdin.isatty():
        keys = ", ".join(dict.fromkeys(grant.key for grant in found))
        raise LlamaherdError(
            f"agents/{name} was not installed: it sets {keys} (listed above); "
            "run again with --yes to install it anyway"
        )
    if not click.confirm(f"install agents/{name}?", default=False, err=True):
        raise CommandFailed(f"agents/{name} was not installed")


def _added_config(app: AppContext, project: Any, fetched: Any, skill: Any, source: str) -> str:
    """The new agent's config.toml: the skill's own, fitted to the project (each change and
    what is left to add is printed), else a commented one."""
    from llamaherd import skill_sources
    from llamaherd.project import read_project_text

    own = skill.path / "config.toml"
    if not own.exists():
        return _agent_config(project, source)
    text, fitted = skill_sources.fit_config(
        read_project_text(own),
        skill_sources.source_config(fetched, skill),
        project.config,
        source,
        set(app.registry.webhook_sources),
    )
    for line in fitted.renamed:
        click.echo(line)
    for item in fitted.todo:
        click.echo(f"to do: {item}".rstrip())
    return text


def _agent_config(project: Any, source: str) -> str:
    """A commented config.toml for an added skill, using the project's first model."""
    from string import Template

    models = list(project.config.get("models", {}))
    line = (
        f"models = [{json.dumps(models[0])}]"
        if models
        else '# models = ["sonnet"]   # names of [models.*] in ../../config.toml'
    )
    return Template(_template("agent-config.toml")).substitute(
        source=json.dumps(source), models=line
    )


def register(cli: click.Group) -> None:
    for command in (plugins_command, validate_command, schema_command, new_command, add_command):
        cli.add_command(command)

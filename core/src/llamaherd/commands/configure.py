"""``al config AGENT`` (also ``al agent config AGENT``, Action Llama's spelling): edit an agent's
config.toml, its comments kept.

``--set KEY=VALUE`` (a dotted key, a TOML value or else a string) and ``--unset KEY`` are for
scripts; in a terminal without them it asks, section by section as Action Llama's editor does
(models, credentials, schedule, webhooks, params). Either way the result is validated before
anything is written: an edit that would break the agent's config is refused and the file is left
as it was.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.errors import ConfigError, LlamaherdError

SECTIONS = ("models", "credentials", "schedule", "webhooks", "params")


def parse_value(raw: str) -> Any:
    """A TOML value (``2``, ``true``, ``["a", "b"]``, ``"text"``), else the text itself."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def set_key(document: Any, dotted: str, value: Any) -> None:
    """``document[a][b]... = value`` for ``a.b...``, making the tables on the way."""
    import tomlkit

    *parents, last = _parts(dotted)
    table = document
    for part in parents:
        if part not in table:
            table[part] = tomlkit.table()
        table = table[part]
        if not isinstance(table, dict):
            raise LlamaherdError(f"--set {dotted}: {part} is not a table")
    table[last] = value


def unset_key(document: Any, dotted: str) -> None:
    *parents, last = _parts(dotted)
    table = document
    for part in parents:
        table = table.get(part) if isinstance(table, dict) else None
    if not isinstance(table, dict) or last not in table:
        raise LlamaherdError(f"--unset {dotted}: no such key in the agent's config.toml")
    del table[last]


def _parts(dotted: str) -> list[str]:
    parts = dotted.strip().split(".")
    if not all(parts):
        raise LlamaherdError(f"{dotted!r}: expected a dotted key such as schedule or params.repo")
    return parts


def check(app: AppContext, name: str, text: str) -> list[Any]:
    """The problems of agent ``name`` were its config.toml ``text`` (nothing is written)."""
    from llamaherd import compat
    from llamaherd.schema import validate_project

    try:
        own = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LlamaherdError(
            f"agents/{name}/config.toml: the edited file would not be valid TOML: {exc}"
        ) from None
    project = app.project
    agent = project.agent(name)
    agent.config, agent.origins, _ = compat.merge_frontmatter(agent.meta, own)
    return validate_project(project, app.registry, [name])


def save(path: Path, text: str) -> None:
    """Replace ``path`` atomically (a reader never sees half a file)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config.toml.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)


@click.command("config")
@click.argument("agent")
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a (dotted) key: a TOML value, or text (schedule='0 * * * *', scale=2).",
)
@click.option("--unset", "removals", multiple=True, metavar="KEY", help="Remove a key.")
@pass_app
def config_command(
    app: AppContext, agent: str, assignments: tuple[str, ...], removals: tuple[str, ...]
) -> None:
    """Edit agents/AGENT/config.toml: --set KEY=VALUE / --unset KEY, or, in a terminal, a menu
    of its sections. The result is validated before it is written (exit 2 when refused)."""
    import tomlkit

    project = app.project
    path = project.agent(agent).config_file
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    document = tomlkit.parse(before)
    if assignments or removals:
        for assignment in assignments:
            key, sep, raw = assignment.partition("=")
            if not sep:
                raise ConfigError(project.relative(path), key, "--set: expected KEY=VALUE")
            set_key(document, key, parse_value(raw.strip()))
        for key in removals:
            unset_key(document, key)
    elif click.get_text_stream("stdin").isatty():
        if not _menu(app, agent, document):
            click.echo("nothing saved")
            return
    else:
        raise LlamaherdError(
            f"al config {agent}: give --set KEY=VALUE or --unset KEY (or run it in a terminal)"
        )
    text = tomlkit.dumps(document)
    problems = check(app, agent, text)
    if any(p.is_error for p in problems):
        for problem in problems:
            click.echo(str(problem), err=True)
        click.echo(f"{project.relative(path)} left as it was", err=True)
        raise SystemExit(2)
    for problem in problems:
        click.echo(str(problem), err=True)
    if text != before:
        save(path, text)
        click.echo(f"saved {project.relative(path)}")
    else:
        click.echo(f"{project.relative(path)} unchanged")


# ------------------------------------------------------------------ the terminal editor


def _menu(app: AppContext, agent: str, document: Any) -> bool:
    """Action Llama's ``Configure AGENT:`` menu until Done (True) or Ctrl-D/quit (False)."""
    while True:
        click.echo(f"\nConfigure {agent}:")
        for number, section in enumerate(SECTIONS, 1):
            click.echo(f"  {number}) {section:<12} {_shown(document.get(section))}")
        click.echo(f"  {len(SECTIONS) + 1}) Done — save and validate")
        click.echo(f"  {len(SECTIONS) + 2}) Quit without saving")
        picked = click.prompt("Choice", type=click.IntRange(1, len(SECTIONS) + 2))
        if picked == len(SECTIONS) + 2:
            return False
        if picked == len(SECTIONS) + 1:
            problems = check(app, agent, _dumps(document))
            errors = [p for p in problems if p.is_error]
            if not errors:
                return True
            for problem in errors:
                click.echo(str(problem))
            click.echo("fix these first (or quit without saving)")
            continue
        EDITORS[SECTIONS[picked - 1]](app, document)


def _dumps(document: Any) -> str:
    import tomlkit

    return tomlkit.dumps(document)


def _shown(value: Any) -> str:
    if value is None or value == [] or value == {}:
        return "(none)"
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return ", ".join(str(v.get("source", "?")) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _edit_models(app: AppContext, document: Any) -> None:
    defined = ", ".join(app.project.config.get("models") or {}) or "none defined"
    current = ", ".join(document.get("models") or [])
    text = click.prompt(
        f"Models, first is primary (defined: {defined})",
        default=current,
        show_default=bool(current),
    )
    document["models"] = _names(text)


def _edit_credentials(app: AppContext, document: Any) -> None:
    from llamaherd.credentials import CredentialStore

    stored = [f"{t}:{i}" if i != "default" else t for t, i, _ in CredentialStore().list()]
    click.echo(f"Stored credentials: {', '.join(stored) or 'none'}")
    current = ", ".join(document.get("credentials") or [])
    text = click.prompt("Credentials (comma-separated)", default=current, show_default=False)
    _set_or_remove(document, "credentials", _names(text))


def _edit_schedule(app: AppContext, document: Any) -> None:
    current = str(document.get("schedule") or "")
    text = click.prompt("Cron schedule (empty to remove)", default=current, show_default=False)
    _set_or_remove(document, "schedule", text.strip())


def _edit_webhooks(app: AppContext, document: Any) -> None:
    sources = ", ".join(app.project.config.get("webhooks") or {}) or "none in config.toml"
    entries = list(document.get("webhooks") or [])
    current = ", ".join(str(e.get("source", "")) for e in entries)
    text = click.prompt(
        f"Webhook sources (comma-separated; available: {sources})",
        default=current,
        show_default=False,
    )
    kept = {str(e.get("source")): e for e in entries}  # an entry's filters stay with its source
    _set_or_remove(
        document, "webhooks", [kept.get(name) or {"source": name} for name in _names(text)]
    )


def _edit_params(app: AppContext, document: Any) -> None:
    import tomlkit

    params = document.get("params")
    if params is None:
        params = document["params"] = tomlkit.table()
    while True:
        line = click.prompt("Param KEY=VALUE (KEY= removes it; empty when done)", default="")
        if not line.strip():
            break
        key, _, raw = line.partition("=")
        if raw.strip():
            params[key.strip()] = parse_value(raw.strip())
        elif key.strip() in params:
            del params[key.strip()]
    if not params:
        del document["params"]


def _set_or_remove(document: Any, key: str, value: Any) -> None:
    if value:
        document[key] = value
    elif key in document:
        del document[key]


EDITORS = {
    "models": _edit_models,
    "credentials": _edit_credentials,
    "schedule": _edit_schedule,
    "webhooks": _edit_webhooks,
    "params": _edit_params,
}


@click.group("agent")
def agent_group() -> None:
    """Agent management, as Action Llama spells it (``al agent config AGENT``)."""


agent_group.add_command(config_command)


def register(cli: click.Group) -> None:
    cli.add_command(config_command)
    cli.add_command(agent_group)

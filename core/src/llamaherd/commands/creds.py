"""``al creds``: add, list, remove and test stored credentials; list the credential types.

Values are never printed: output names types, instances and fields only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import PurePosixPath
from typing import Any, NoReturn

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.credentials import (
    CredentialStore,
    format_ref,
    is_staged,
    parse_ref,
    unknown_type_message,
)
from llamaherd.errors import CredentialInvalid, LlamaherdError


@click.group("creds")
def creds() -> None:
    """Manage credentials in ~/.action-llama/credentials (or $AL_CREDENTIALS_DIR)."""


def _credential_type(app: AppContext, type_name: str) -> Any:
    try:
        return app.registry.credential_types[type_name]
    except KeyError:
        raise LlamaherdError(unknown_type_message(type_name)) from None


# --------------------------------------------------------------------------- add


def _field_sources(credential_type: Any, specs: tuple[str, ...], option: str) -> dict[str, str]:
    """Map field -> VAR or PATH from ``[FIELD=]X`` specs (bare X only for one-field types)."""
    names = [f.name for f in credential_type.fields]
    sources: dict[str, str] = {}
    for spec in specs:
        field, sep, rest = spec.partition("=")
        # Env var names cannot contain "=", but a path can: only a known field name splits it.
        if sep and field in names:
            target, source = field, rest
        elif len(names) == 1 and not (sep and option == "--from-env"):
            target, source = names[0], spec
        else:
            raise LlamaherdError(
                f"{option} {spec}: {credential_type.name} has fields {', '.join(names)}; "
                f"use {option} FIELD={'VAR' if option == '--from-env' else 'PATH'}"
            )
        if target in sources:
            raise LlamaherdError(f"{option}: field {target!r} given twice")
        sources[target] = source
    return sources


def _value_from_env(field: str, var: str) -> str:
    value = os.environ.get(var, "").strip()
    if not value:
        raise LlamaherdError(
            f"--from-env: environment variable {var} (for field {field!r}) is not set or empty"
        )
    return value


def _value_from_file(field: str, path: str) -> str:
    try:
        # "-" is stdin, for scripts: `printf %s "$TOKEN" | al creds add github_token --file -`
        with click.open_file(os.path.expanduser(path), encoding="utf-8") as fh:
            value = fh.read()
    except OSError as exc:
        raise LlamaherdError(f"--file {path} (for field {field!r}): {exc.strerror}") from None
    except UnicodeDecodeError:
        raise LlamaherdError(f"--file {path} (for field {field!r}): not UTF-8 text") from None
    if not value.strip():
        raise LlamaherdError(f"--file {path} (for field {field!r}): the file is empty")
    return value


def _prompt(field: Any) -> str:
    label = f"{field.name} ({field.description})" if field.description else field.name
    return click.prompt(label, hide_input=field.secret, value_proc=_non_blank)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise click.UsageError("a value is required")
    return value


@creds.command("add")
@click.argument("ref", metavar="TYPE[:INSTANCE]")
@click.option(
    "--from-env",
    "from_env",
    multiple=True,
    metavar="[FIELD=]VAR",
    help="Read a field from an environment variable (repeat FIELD=VAR per field).",
)
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="[FIELD=]PATH",
    help="Read a field from a file, or stdin for '-' (repeat FIELD=PATH per field).",
)
@pass_app
def add(app: AppContext, ref: str, from_env: tuple[str, ...], files: tuple[str, ...]) -> None:
    """Store a credential; prompts for every field not given (secret fields hidden)."""
    type_name, instance = parse_ref(ref)
    credential_type = _credential_type(app, type_name)
    env_sources = _field_sources(credential_type, from_env, "--from-env")
    file_sources = _field_sources(credential_type, files, "--file")
    both = sorted(env_sources.keys() & file_sources.keys())
    if both:
        raise LlamaherdError(f"field {both[0]!r} given by both --from-env and --file")
    values: dict[str, str] = {}
    for field in credential_type.fields:
        if field.name in env_sources:
            values[field.name] = _value_from_env(field.name, env_sources[field.name])
        elif field.name in file_sources:
            values[field.name] = _value_from_file(field.name, file_sources[field.name])
        else:
            values[field.name] = _prompt(field)
    store = CredentialStore()
    verb = "replaced" if store.exists(type_name, instance) else "added"
    store.write(type_name, instance, values)
    click.echo(
        f"{verb} {format_ref(type_name, instance)} ({', '.join(values)}) in {store.path(type_name, instance)}"
    )


# --------------------------------------------------------------------------- ls


def _project_users(app: AppContext) -> dict[tuple[str, str], list[str]]:
    """Who in the current project uses each credential (``credentials.users``: agents, models,
    webhook sources); nothing outside a project (a broken one is a warning)."""
    from llamaherd.credentials import users
    from llamaherd.project import find_root

    if app.project_dir is None and find_root() is None:
        return {}
    try:
        return users(app.project, app.registry)
    except LlamaherdError as exc:
        click.echo(f"warning: {exc}", err=True)
        return {}


def _inventory(app: AppContext, store: CredentialStore) -> list[dict[str, Any]]:
    """Each stored credential, and each one the project uses that is not stored, with who
    uses it (``used_by``; ``agents``: the agents among them)."""
    stored = {(type_name, instance): fields for type_name, instance, fields in store.list()}
    used = _project_users(app)
    agents = set(app.project.agents) if used else set()
    return [
        {
            "type": key[0],
            "instance": key[1],
            "fields": stored.get(key, []),
            "stored": key in stored,
            "agents": [user for user in used.get(key, []) if user in agents],
            "used_by": used.get(key, []),
        }
        for key in sorted({*stored, *used})
    ]


@creds.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def ls(app: AppContext, as_json: bool) -> None:
    """List stored credentials (no values) and who uses them: agents, models (their key) and
    webhook sources (their signing secret)."""
    store = CredentialStore()
    rows = _inventory(app, store)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no credentials in {store.root}; add one with `al creds add TYPE[:INSTANCE]`")
        return
    from llamaherd.tables import Column, print_table

    print_table(
        [Column("TYPE", keep=True), Column("INSTANCE", keep=True), "FIELDS", "USED BY"],
        (
            (
                row["type"],
                row["instance"],
                ", ".join(row["fields"]) if row["stored"] else "[red]missing[/red]",
                ", ".join(row["used_by"]) or "-",
            )
            for row in rows
        ),
    )


# --------------------------------------------------------------------------- rm, types, test


@creds.command("rm")
@click.argument("ref", metavar="TYPE[:INSTANCE]")
def rm(ref: str) -> None:
    """Delete a stored credential."""
    type_name, instance = parse_ref(ref)
    store = CredentialStore()
    if not store.remove(type_name, instance):
        raise LlamaherdError(f"no credential {format_ref(type_name, instance)} in {store.root}")
    click.echo(f"removed {format_ref(type_name, instance)}")


def _env_names(credential_type: Any) -> list[str]:
    """Names of the env vars a type exports, found by calling ``env`` with placeholders."""
    placeholders = {field.name: f"<{field.name}>" for field in credential_type.fields}
    staged_at = PurePosixPath("/credentials") / credential_type.name / "default"
    return sorted(credential_type.env(placeholders, staged_at))


@creds.command("types")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_app
def types(app: AppContext, as_json: bool) -> None:
    """List every credential type the installed plugins provide."""
    registry = app.registry
    rows = [
        {
            "type": name,
            "plugin": registry.owner.get(("credential_types", name)),
            "description": getattr(credential_type, "description", ""),
            "fields": [
                {"name": f.name, "secret": f.secret, "description": f.description}
                for f in credential_type.fields
            ],
            "env": _env_names(credential_type) if is_staged(credential_type) else [],
            "staged": is_staged(credential_type),
            "validates": callable(getattr(credential_type, "validate", None)),
        }
        for name, credential_type in sorted(registry.credential_types.items())
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from llamaherd.tables import Column, print_table

    print_table(
        [Column("TYPE", keep=True), "PLUGIN", "FIELDS", "ENV VARS"],
        (
            (
                row["type"],
                row["plugin"] or "-",
                ", ".join(f["name"] + (" (secret)" if f["secret"] else "") for f in row["fields"]),
                (", ".join(row["env"]) or "-") if row["staged"] else "(not staged into runs)",
            )
            for row in rows
        ),
    )


@creds.command("test")
@click.argument("ref", metavar="TYPE[:INSTANCE]")
@pass_app
def test(app: AppContext, ref: str) -> None:
    """Check a stored credential against its service (exit 1 when it is refused)."""
    from llamaherd.credentials import test_credential

    type_name, instance = parse_ref(ref)
    credential_type = _credential_type(app, type_name)
    store = CredentialStore()
    shown = format_ref(type_name, instance)
    values = store.read(type_name, instance)
    if values is None:
        raise LlamaherdError(
            f"no credential {shown} in {store.root}; add it with `al creds add {shown}`"
        )
    try:
        detail = test_credential(credential_type, values)
    except CredentialInvalid as exc:
        hint = f"; run `al creds add {shown}`" if str(exc).startswith("missing field") else ""
        _fail(shown, f"{exc}{hint}")
    click.echo(f"ok: {shown}" + (f": {detail}" if detail else ""))


def _fail(shown: str, message: str) -> NoReturn:
    click.echo(f"failed: {shown}: {message}", err=True)
    sys.exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(creds)

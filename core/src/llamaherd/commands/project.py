"""Project commands: plugins, validate, schema, new, add, prompt."""

from __future__ import annotations

import json

import click


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--all", "show_all", is_flag=True, help="Include core's built-in plugins.")
def plugins_command(as_json: bool, show_all: bool) -> None:
    """List installed plugins and what each registers."""
    from llamaherd.plugins import get_manager

    manager = get_manager()
    manager.registry()
    rows = [info for info in manager.info.values() if show_all or not info.builtin]
    if as_json:
        click.echo(json.dumps([info.__dict__ for info in rows], indent=2))
        return
    for info in rows:
        click.echo(f"{info.name}\t{info.distribution}\t{info.version}\t{', '.join(info.registers) or '(registers nothing yet)'}")


def register(cli: click.Group) -> None:
    cli.add_command(plugins_command)

"""``al setup host-user``: create the OS user agent runs switch to."""

from __future__ import annotations

import os
import shlex
import sys

import click

from llamaherd_host_user.identity import DEFAULT_USER, useradd_command
from llamaherd_host_user.layout import runs_base


@click.command("host-user")
@click.option(
    "--user",
    default=DEFAULT_USER,
    show_default=True,
    help="Name of the user agent runs switch to ([runtime] run_as).",
)
def setup_host_user(user: str) -> None:
    """Create the system user for host-user runs (as root), or print the commands to do so."""
    command = useradd_command(user)
    if os.geteuid() != 0:
        click.echo(f"not running as root; run this as root to create the agent user {user!r}:")
        click.echo(f"  sudo {shlex.join(command)}")
        click.echo(f"or: sudo al setup host-user --user {shlex.quote(user)}")
        sys.exit(1)
    from llamaherd.api import SandboxError
    from llamaherd_host_user.doctor import create_user

    try:
        click.echo(create_user(user))
    except SandboxError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    base = runs_base()
    click.echo(f"runs will use {base}/<run-id>/ (owned by {user!r}, mode 0700)")
    click.echo(f'set in agents/<name>/config.toml: [runtime] type = "host-user", run_as = "{user}"')

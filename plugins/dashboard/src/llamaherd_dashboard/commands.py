"""``al dashboard password``: set the password the dashboard's sign-in accepts."""

from __future__ import annotations

import sys

import click

from llamaherd.api import AppContext, LlamaherdError, pass_app


@click.group("dashboard")
def dashboard() -> None:
    """The web dashboard that `al start` serves."""


@dashboard.command("password")
@click.option(
    "--stdin",
    "from_stdin",
    is_flag=True,
    help="Read the password from the first line of standard input instead of asking for it "
    "twice in a terminal.",
)
@pass_app
def password(app: AppContext, from_stdin: bool) -> None:
    """Set the password the dashboard's sign-in accepts besides the control token.

    Only a salted scrypt verifier of it is kept, in .al/dashboard-password (readable by you
    alone); a running scheduler takes it at the next sign-in. Remove that file to sign in
    with the control token only.
    """
    from llamaherd_dashboard.password import MIN_LENGTH, write_verifier

    if from_stdin:
        value = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        value = click.prompt(
            "New dashboard password", hide_input=True, confirmation_prompt=True, err=True
        )
    else:
        raise LlamaherdError(
            "al dashboard password: no terminal to ask in; give the password on standard "
            "input with --stdin"
        )
    if len(value) < MIN_LENGTH:
        raise LlamaherdError(f"the password must have at least {MIN_LENGTH} characters")
    path = write_verifier(app.project.state_dir, value)
    click.echo(f"wrote {path}: a salted scrypt verifier (the password itself is kept nowhere)")

"""``al prompt AGENT``: print the system and user prompts a run of AGENT would get."""

from __future__ import annotations

from pathlib import Path

import click

from llamaherd.cli import AppContext, pass_app

TRIGGERS = ("scheduled", "manual", "webhook", "agent")


def preview_trigger(kind: str, payload: dict) -> dict:
    """The trigger dict of a run, as the queue would hand it over, for a preview."""
    if kind == "agent":
        payload = {
            "caller_agent": "(caller)",
            "caller_run": "(caller run)",
            "context": "",
            **payload,
        }
    return {"kind": kind, "payload": payload, "prompt": "", "source": "preview"}


def register(cli: click.Group) -> None:
    @cli.command("prompt")
    @click.argument("agent")
    @click.option(
        "--trigger",
        "kind",
        type=click.Choice(TRIGGERS),
        default="manual",
        show_default=True,
        help="Which trigger block to show.",
    )
    @click.option(
        "--payload",
        type=click.Path(dir_okay=False, path_type=Path),
        help="JSON file: the trigger's payload (webhook fields, call context, ...).",
    )
    @pass_app
    def prompt(app: AppContext, agent: str, kind: str, payload: Path | None) -> None:
        """Print the system and user prompts a run of AGENT gets (no credential values)."""
        from llamaherd.commands.scheduler import _load_payload
        from llamaherd.credentials import CredentialStore
        from llamaherd.prompts import build_prompts
        from llamaherd.session import RunContext

        target = app.project.agent(agent)
        run = RunContext("(preview)", target, engine=None, store=None)
        system, user = build_prompts(
            target,
            app.registry,
            preview_trigger(kind, _load_payload(payload)),
            run=run,
            credential_store=CredentialStore(),
        )
        click.echo("=== system ===")
        click.echo(system)
        click.echo("\n=== user ===")
        click.echo(user)

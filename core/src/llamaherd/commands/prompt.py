"""``al prompt AGENT``: print the system and user prompts a run of AGENT would get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from llamaherd.cli import AppContext, pass_app
from llamaherd.errors import LlamaherdError


def preview_trigger(registry: Any, agent: Any, kind: str, payload: dict[str, Any]) -> dict:
    """The trigger dict a run started by a ``kind`` trigger with ``payload`` gets, built by that
    trigger type's ``preview`` when it has one (so it is what a real run sees)."""
    from llamaherd.triggers import for_kind, trigger_kind
    from llamaherd.types import TriggerEvent

    trigger_type = for_kind(registry, kind)
    if trigger_type is None:
        kinds = sorted(trigger_kind(t) for t in registry.trigger_types.values())
        raise LlamaherdError(
            f"--trigger: expected one of {', '.join(kinds)} (the installed trigger kinds), "
            f"got {kind!r}"
        )
    preview = getattr(trigger_type, "preview", None)
    event = preview(agent, payload) if preview else TriggerEvent(agent.name, kind, payload)
    return {
        "kind": event.kind,
        "payload": event.payload,
        "prompt": event.prompt,
        "source": event.source or "preview",
    }


def register(cli: click.Group) -> None:
    @cli.command("prompt")
    @click.argument("agent")
    @click.option(
        "--trigger",
        "kind",
        default="manual",
        show_default=True,
        help="Which trigger's block to show: manual, scheduled, webhook, agent, or the kind a "
        "plugin's trigger type emits.",
    )
    @click.option(
        "--payload",
        type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
        help="JSON file: the trigger's payload (webhook fields, call context, ...); - reads "
        "standard input.",
    )
    @pass_app
    def prompt(app: AppContext, agent: str, kind: str, payload: Path | None) -> None:
        """Print the system and user prompts a run of AGENT gets (no credential values), the
        `` !`command` `` markers of its SKILL.md (run in the run's sandbox when it starts,
        each replaced by its output), and the flow keys its `[flow]` picks out of the
        trigger."""
        from llamaherd.commands.scheduler import _load_payload
        from llamaherd.credentials import CredentialStore
        from llamaherd.prompts import build_prompts
        from llamaherd.session import ActiveRun

        target = app.project.agent(agent)
        trigger = preview_trigger(app.registry, target, kind, _load_payload(payload))
        run = ActiveRun("(preview)", target, engine=None, store=None, trigger=trigger)
        system, user = build_prompts(
            target, app.registry, trigger, run=run, credential_store=CredentialStore()
        )
        click.echo("=== system ===")
        click.echo(system)
        click.echo("\n=== user ===")
        click.echo(user)
        context_commands(target)
        flow_keys(target, trigger)


def context_commands(agent: Any) -> None:
    """The ``!`command``` markers of the agent's SKILL.md body: the system prompt above shows
    them as written, a run shows each command's output in its place (they run in its sandbox
    at its start, so a preview cannot run them)."""
    from llamaherd.injection import MARKER

    commands = MARKER.findall(agent.body)
    if not commands:
        return
    click.echo("\n=== context commands ===")
    click.echo(
        f"{len(commands)} !`command` marker(s) in the body above: each runs in the run's "
        "sandbox when it starts (after hooks.pre) and its output takes its place in the "
        "system prompt:"
    )
    for command in commands:
        click.echo(f"  !`{command}`")


def flow_keys(agent: Any, trigger: dict[str, Any]) -> None:
    """The keys (and priority) the agent's ``[flow]`` picks out of this trigger."""
    from llamaherd.flow import preview

    shown = preview(
        agent.flow, trigger["kind"], trigger["payload"], trigger["prompt"], trigger["source"]
    )
    if not shown:
        return
    click.echo("\n=== flow ===")
    for control, value in shown.items():
        click.echo(f"{control}: {value!r}" if control != "priority" else f"priority: {value:g}")

"""Hook specifications: the public plugin API of llamaherd.

Each ``register_*`` hook receives a ``register`` callback. Call it once per object you provide;
core records which plugin supplied it and refuses duplicate names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable

    import click
    from starlette.applications import Starlette

hookspec = pluggy.HookspecMarker("llamaherd")

# ----------------------------------------------------------------- what a plugin provides


@hookspec
def register_trigger_types(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.TriggerType` objects (cron, webhooks, ...)."""


@hookspec
def register_webhook_sources(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.WebhookSource` objects (``[webhooks.<name>] type``)."""


@hookspec
def register_runtimes(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.Runtime` objects (``[runtime] type`` of an agent)."""


@hookspec
def register_credential_types(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.CredentialType` objects for the credential store."""


@hookspec
def register_language_skills(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.LanguageSkill` objects: preamble text plus tools."""


@hookspec
def register_providers(register: Callable[[Any], None]) -> None:
    """Register :class:`llamaherd.types.Provider` objects (``[models.<name>] provider``)."""


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``al`` click group."""


@hookspec
def register_routes(app: Starlette) -> None:
    """Add HTTP routes to the scheduler's server; ``app.state.engine`` is the running Engine."""


# ----------------------------------------------------------------- run lifecycle


@hookspec
def run_started(run: Any) -> None:
    """Called when a run's sandbox is up, before ``hooks.pre``. ``run`` is a RunContext."""


@hookspec
def run_finished(run: Any, result: Any) -> None:
    """Called after a run ended, whatever its state. ``result`` is a RunResult."""

"""Hook specifications: the plugin API of llamaherd, with ``llamaherd.types`` (re-exported by
``llamaherd.api``).

A plugin module (or object) implements hooks by name, marked with ``llamaherd.hookimpl``; its
distribution names it in the ``llamaherd`` entry-point group. Each ``register_*`` hook receives a
``register`` callback: call it once per object you provide. Core checks each object against its
protocol (refusing one that does not conform, with one warning), records which plugin supplied
it and refuses a duplicate name. An implementation that raises becomes one warning naming the
plugin; the other plugins' implementations still run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click
    from starlette.applications import Starlette

    from llamaherd.project import Agent
    from llamaherd.types import (
        AdmissionCheck,
        ControlChannel,
        CredentialType,
        DoctorCheck,
        Expectation,
        LanguageSkill,
        ProjectKey,
        Provider,
        RunContext,
        RunResult,
        Runtime,
        TableSet,
        TriggerInfo,
        TriggerType,
        WebhookSource,
    )

hookspec = pluggy.HookspecMarker("llamaherd")

# ----------------------------------------------------------------- what a plugin provides


@hookspec
def register_trigger_types(register: Callable[[TriggerType], None]) -> None:
    """Register trigger types: sources of runs (cron schedules, webhooks, a file watcher...).

    :param register: call with each :class:`~llamaherd.types.TriggerType`. A running scheduler
        calls its ``start(ctx)`` once with a :class:`~llamaherd.types.TriggerContext` and
        ``stop()`` at shutdown; its ``schema`` adds keys to agents' ``config.toml``.
    """


@hookspec
def register_webhook_sources(register: Callable[[WebhookSource], None]) -> None:
    """Register webhook source types: how a service's deliveries are verified and parsed.

    :param register: call with each :class:`~llamaherd.types.WebhookSource`; its ``name`` is a
        ``type`` of a project ``[webhooks.<name>]`` table, its ``schema`` that table's keys.
    """


@hookspec
def register_runtimes(register: Callable[[Runtime], None]) -> None:
    """Register runtimes: where a run's tool calls execute.

    :param register: call with each :class:`~llamaherd.types.Runtime`; its ``name`` is an
        agent's ``[runtime] type``, its ``schema`` the keys of that table.
    """


@hookspec
def register_credential_types(register: Callable[[CredentialType], None]) -> None:
    """Register credential types of the store (``<store>/<type>/<instance>/<field>``).

    :param register: call with each :class:`~llamaherd.types.CredentialType`; its ``name`` is
        what agents list in ``credentials`` and ``al creds add`` takes.
    """


@hookspec
def register_language_skills(register: Callable[[LanguageSkill], None]) -> None:
    """Register language skills: system-prompt text and tools offered to every run's model.

    :param register: call with each :class:`~llamaherd.types.LanguageSkill`; each of its tools
        is also a gateway endpoint the sandbox commands call.
    """


@hookspec
def register_providers(register: Callable[[Provider], None]) -> None:
    """Register model providers (``[models.<name>] provider``).

    :param register: call with each :class:`~llamaherd.types.Provider`; its ``schema`` adds
        keys to the ``[models.<name>]`` tables that use it.
    """


@hookspec
def register_tables(register: Callable[[TableSet], None]) -> None:
    """Register the plugin's own tables in the store, created and migrated when a store opens.

    :param register: call with each :class:`~llamaherd.types.TableSet` (a name, a schema
        version, a function defining its peewee models on a given database, its migration steps,
        an optional prune). The plugin reaches its bound models with ``store.tables(name)`` and
        writes them inside ``store.atomic()``; versions are recorded per name in the store.
    """


@hookspec
def register_project_keys(register: Callable[[ProjectKey], None]) -> None:
    """Register top-level keys of the project ``config.toml`` (``[telemetry]``...).

    :param register: call with each :class:`~llamaherd.types.ProjectKey`; its ``schema`` is the
        JSON Schema of the key's value. A plugin's key replaces core's of the same name (core
        accepts some of Action Llama's keys that it does not act on; the plugin that acts on
        one owns its schema).
    """


@hookspec
def register_doctor_checks(register: Callable[[DoctorCheck], None]) -> None:
    """Register checks ``al doctor`` runs beside core's (a runtime's daemon, images, users...).

    :param register: call with each :class:`~llamaherd.types.DoctorCheck`; its
        ``check(project, registry)`` returns :class:`~llamaherd.types.Finding` objects, each
        optionally with a :class:`~llamaherd.types.Fix` that ``al doctor --fix`` applies.
    """


@hookspec
def register_admission_checks(register: Callable[[AdmissionCheck], None]) -> None:
    """Register admission checks: reasons to start none of an agent's queued runs for now (a
    budget spent, no host of a pool free, a maintenance window...).

    :param register: call with each :class:`~llamaherd.types.AdmissionCheck`. Before it claims
        an agent's next item, the dispatcher asks every check's ``hold(agent, store, now)``; a
        reason (a string) keeps the agent's triggers queued, never lost, and ``al stat`` shows
        it as why the agent waits. Core's budgets are one (``llamaherd.budgets``).
    """


@hookspec
def register_expectations(register: Callable[[Expectation], None]) -> None:
    """Register kinds of expectation of agent test cases (``al test``): what a case's
    ``[expect]`` table may check about the run (core's: ``state``, ``commands``, ``return``,
    ``tool_calls``, ``max_turns``...; a plugin's: what its service was asked to do).

    :param register: call with each :class:`~llamaherd.types.Expectation`; its ``name`` is a
        key of ``[expect]``, its ``schema`` the JSON Schema of that key's value, and
        ``check(expected, run)`` returns the :class:`~llamaherd.types.Unmet` parts, given the
        :class:`~llamaherd.types.CaseRun` (what the test run did).
    """


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add subcommands to ``al``.

    :param cli: the root click group; ``cli.add_command(...)``. ``llamaherd.api.pass_app``
        gives a command the project (``AppContext.project``) and the plugin registry.
    """


@hookspec
def register_routes(app: Starlette) -> None:
    """Add HTTP routes to the scheduler's server (core's control API and gateway are routes of
    built-in plugins too).

    :param app: the Starlette app; ``app.router.routes.append(Route(...))``.
        ``app.state.engine`` is the running :class:`~llamaherd.engine.Engine`; guard routes
        that change or show anything with ``llamaherd.api.require_token``; set
        ``app.state.body_limits[path]`` to what each of your routes' bodies may hold (bytes,
        or a function of the request's path giving them; a key ending in "/" is a prefix;
        1 MiB otherwise): the server answers a larger body 413 before reading it, and bounds
        every body's time and the bytes in flight (``llamaherd.http_guard``). A hot path may
        put a plain ASGI handler at ``app.state.raw_routes[prefix]``: requests under that
        prefix reach it ahead of Starlette's routing, within the same bounds.
    """


@hookspec
def describe_triggers(agent: Agent, now: float) -> list[TriggerInfo] | None:
    """Describe the triggers of ``agent`` that your plugin provides, for the dashboard's agent
    page: one :class:`~llamaherd.types.TriggerInfo` per schedule, webhook entry, watched
    path... the agent's config sets (an empty list or None when it uses none of yours).

    :param agent: the agent (``agent.config`` is its merged ``config.toml``).
    :param now: epoch seconds now, for ``TriggerInfo.next_fire``.
    """


# ----------------------------------------------------------------- remote schedulers


@hookspec(firstresult=True)
def open_control_channel(environment: str) -> ControlChannel | None:
    """Open a channel to the control API of the scheduler deployed as ``environment``, for the
    ``-E/--env NAME`` of the commands that talk to a scheduler (``al stat``, ``al runs``,
    ``al logs``, ``al stats``, ``al run``, ``al pause``, ``al resume``, ``al kill``,
    ``al stop``), unless that environment's file has no ``[server]`` (it only layers settings).

    Return ``None`` when ``environment`` is not one of yours, so another plugin may answer; the
    first :class:`~llamaherd.types.ControlChannel` returned is used and closed when the command
    ends. Raise ``LlamaherdError`` when it is yours but cannot be reached (host down, no
    scheduler running there). Without any implementation ``--env`` names the distribution to
    install.

    :param environment: the name given to ``--env`` (or ``$AL_ENV``, or the project's
        ``.env.toml`` binding).
    """


# ----------------------------------------------------------------- run lifecycle


@hookspec
def run_started(run: RunContext) -> None:
    """A run's sandbox is up; called before its ``hooks.pre`` and its first model turn (not
    again when a parked run resumes).

    :param run: the run (``run_id``, ``agent``, ``trigger``, ``sandbox``, ``log``).
    """


@hookspec
def run_finished(run: RunContext, result: RunResult) -> None:
    """A run ended, whatever its state; called before its sandbox is removed.

    :param run: the same run as in ``run_started``.
    :param result: its final ``state`` (done, error, timeout, killed), ``exit_code``,
        ``reason``, ``return_value`` and the model's last ``text``.
    """


@hookspec
def run_event(run: RunContext, type: str, data: dict[str, Any], at: float) -> None:
    """An event was recorded in a run's log (``model_call``, ``tool_call``, ``hook``...: what
    ``al logs RUN --json`` shows), redacted as stored.

    Called on one background thread, never the run's: in the order the events were recorded,
    after the run's own write; a slow implementation delays only later events (past
    ``llamaherd.run_events.QUEUE_SIZE`` waiting events, new ones are dropped with a warning),
    and one that raises is a warning. So a ``run_finished`` may come before the last events of
    its run.

    :param run: the run, as in ``run_started``.
    :param type: the event type.
    :param data: the event's data (do not change it).
    :param at: when it was recorded (epoch seconds, the store's clock).
    """

"""The public API of llamaherd: everything a plugin may import, and nothing else.

A plugin (every distribution under ``plugins/`` and ``contrib/`` included) imports ``hookimpl``
from ``llamaherd`` and the rest from here; core's other modules may change without notice, and
a test keeps the first-party plugins to this surface. Names load lazily on first use, so a
plugin importing one helper does not pay for the database layer or the HTTP stack.

What is here, by topic:

- protocols a plugin implements, and the values that cross them: ``TriggerType`` with
  ``TriggerContext``/``TriggerEvent``/``EmitResult`` (and ``Registry`` for ``bind``),
  ``WebhookSource`` with ``WebhookFilter``/``WebhookReply``, ``Runtime`` with
  ``Sandbox``/``SandboxSpec``/``StagedFile``/``ExecResult`` (and ``SHARED_PATH``, where a
  sandbox shows the project's ``shared/`` files; ``ExecOutput``, an exec's output streamed by
  line and kept bounded), ``CredentialType``/``CredentialField``,
  ``LanguageSkill``/``Tool``/``RunContext``, ``Provider`` with ``Message``/``ToolCall``/
  ``ToolSpec``/``Reply``/``Usage``/``ModelConfig`` and ``Pricing`` (its ``prices`` table),
  ``RunResult`` for ``run_finished``, ``ProjectKey`` (a top-level project key a plugin acts
  on), ``DoctorCheck`` with ``Finding``/``Fix`` (``al doctor``), ``AdmissionCheck`` (a
  reason to hold an agent's queued runs) and ``Expectation`` with ``CaseRun``/``Unmet`` (a key
  of an agent test case's ``[expect]``);
- errors shown to users as one line: ``LlamaherdError``, ``ConfigError`` (and
  ``ConfigWarning``, a finding of a plugin's ``validate`` that fails nothing), ``SandboxError``
  (and, from a runtime, ``SandboxBusy``: no room now, put the run back; ``SandboxLost``: the
  sandbox went away with its host),
  ``CredentialError``, ``CredentialInvalid``, ``StoreError``; for providers ``ProviderError``,
  ``RateLimited``, ``AuthError``, ``Transient``, ``Unavailable``, ``Fatal``;
- helpers: ``clock``, ``host_id``, ``parse_duration``, ``lookup``/``MISSING`` (dotted paths);
  webhook signatures (``hmac_digest``, ``signature_matches``, ``fresh``,
  ``DEFAULT_TOLERANCE``) and ``HmacSource``, a base for sources signed with an HMAC of the
  body (``body_digest``), with ``pick``, ``clip`` and ``json_object`` for reading payloads
  into normalised fields, ``absent``/``first_absent`` for what a payload lacks and
  ``unrouted`` (why a parsed delivery goes to no agent: ignored, or incomplete), ``clean_text``
  (lone UTF-16 surrogates made U+FFFD and numbers that are not finite None, in a value taken
  from outside) and ``admit_json`` (the same, and ``OverLimit`` when it nests deeper or holds
  longer integers than any value from outside may; ``json_too_deep()`` is that error for a
  parser that gave up: ``RecursionError``); provider HTTP
  (``post_json``, ``http_error``, ``http_timeout``, ``parse_retry_after``, ``scrub``,
  ``INVALID_ARGUMENTS``, ``ModelKey``); credentials (``CredentialStore``, ``parse_ref``,
  ``format_ref``, ``check_name``, ``credential_files``, and for web services'
  types ``ServiceCredential``, ``call_service`` and ``check_secret``); the project
  (``Project``, ``Agent``, ``load_project``, ``read_toml``, ``read_project_text``);
- for plugins that add commands (``register_commands``): ``AppContext``, ``pass_app``,
  ``environment_option`` (``-E/--env NAME``; ``AppContext.remote()`` and ``.binding()``),
  ``print_table``/``Column`` (every listing prints through it: one header style, one record
  per line when piped, an ellipsis rather than a fold in a terminal; cells are console markup,
  ``escape_markup`` for text you did not write),
  ``ControlClient`` (a running scheduler's control API), ``scheduler_info``, ``pid_alive``; for deployment
  (``llamaherd-deploy``): ``validate_project``/``Problem`` (check a project before shipping
  it), ``referenced_credentials`` (exactly the credentials it uses), ``describe_plugins``/
  ``PluginInfo`` and ``agents_using`` (which installed distributions it needs),
  ``shared_entries`` (the ``shared/`` files runs see), and
  environments (``environments_dir``, ``environment_names``, ``environment_file``,
  ``check_environment_name``, ``resolve_environment``/``Binding``, ``bind_environment``,
  ``read_env_toml``/``ENV_TOML``, ``read_environment``, ``deep_merge``, ``is_deployed``);
- for plugins that reach deployed schedulers (``open_control_channel``): ``ControlChannel``;
- for runtimes on other machines: ``SshTarget`` (a validated host, user, port, key and
  ``ssh_options``), ``SshMaster`` (one multiplexed OpenSSH connection: sessions, scripts,
  socket forwards), ``SshMasters`` (one master per target for the process), ``SshError``,
  ``tar_archive`` (a run's files in one archive, modes kept);
- for plugins that keep their own tables (``register_tables``): ``TableSet``, ``Tables`` (what
  ``store.tables(name)`` returns) and ``JSONText`` (JSON in a TEXT column, as core stores it);
- for plugins that add routes (``register_routes``; ``app.state.engine`` is the ``Engine``):
  ``Engine``, ``Store``, ``RunRow``, the request checks (``authorized``, ``token_matches``,
  ``bearer_token``, ``known_host``, ``is_local``, ``require_token``,
  ``json_body``, ``control_token``), the
  operations the CLI and control API use (``queue_manual``, ``set_agent_state``,
  ``answer_suspension``, ``state_of``, ``is_suspended``, ``human_wait``, ``reply_to_run``,
  ``say_to_run``; ``record_run``, ``replay_run`` and ``replayed_dict``: ``al record`` and
  ``al replay``) and what ``al stat`` shows
  (``agent_rows``, ``run_dict``, ``next_fire``, ``FINAL``, ``SETTABLE_STATES``, ``ago``,
  ``until``, ``event_summary``, ``serving_status``), and the triggers plugins describe
  (``agent_triggers``, ``TriggerInfo``: the ``describe_triggers`` hook).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llamaherd import __version__, hookimpl

if TYPE_CHECKING:
    from llamaherd.agent_tests.record import record_run
    from llamaherd.agent_tests.replay import replay as replay_run
    from llamaherd.agent_tests.replay import replayed_dict
    from llamaherd.agents import (
        answer_suspension,
        human_wait,
        is_suspended,
        queue_manual,
        reply_to_run,
        say_to_run,
        set_agent_state,
        state_of,
    )
    from llamaherd.auth import (
        authorized,
        bearer_token,
        control_token,
        is_local,
        json_body,
        known_host,
        require_token,
        token_matches,
    )
    from llamaherd.cli import AppContext, environment_option, pass_app
    from llamaherd.client import ControlClient
    from llamaherd.clock import clock, host_id
    from llamaherd.credentials import (
        CredentialError,
        CredentialStore,
        check_name,
        credential_files,
        format_ref,
        parse_ref,
    )
    from llamaherd.credentials import referenced as referenced_credentials
    from llamaherd.durations import parse_duration
    from llamaherd.engine import Engine
    from llamaherd.environments import (
        ENV_TOML,
        Binding,
        deep_merge,
        environment_file,
        environments_dir,
        is_deployed,
        load_project,
        read_env_toml,
        read_environment,
    )
    from llamaherd.environments import bind as bind_environment
    from llamaherd.environments import check_name as check_environment_name
    from llamaherd.environments import names as environment_names
    from llamaherd.environments import resolve as resolve_environment
    from llamaherd.errors import (
        AuthError,
        CommandFailed,
        ConfigError,
        ConfigWarning,
        CredentialInvalid,
        Fatal,
        LlamaherdError,
        ProviderError,
        RateLimited,
        SandboxBusy,
        SandboxError,
        SandboxLost,
        Transient,
        Unavailable,
    )
    from llamaherd.execoutput import ExecOutput
    from llamaherd.inbound import OverLimit
    from llamaherd.inbound import admit as admit_json
    from llamaherd.inbound import clean as clean_text
    from llamaherd.inbound import too_deep as json_too_deep
    from llamaherd.local import scheduler_info
    from llamaherd.logview import summary as event_summary
    from llamaherd.markup import escape as escape_markup
    from llamaherd.openssh import SshError, SshMaster, SshMasters, SshTarget, tar_archive
    from llamaherd.plugins import PluginInfo, Registry, describe_plugins
    from llamaherd.processes import pid_alive
    from llamaherd.project import Agent, Project, read_project_text, read_toml
    from llamaherd.providers import (
        INVALID_ARGUMENTS,
        ModelKey,
        http_error,
        http_timeout,
        parse_retry_after,
        post_json,
        scrub,
    )
    from llamaherd.schema import Problem, validate_project
    from llamaherd.services import ServiceCredential, call_service, check_secret
    from llamaherd.shared_dir import shared_entries
    from llamaherd.signatures import DEFAULT_TOLERANCE, fresh, hmac_digest, signature_matches
    from llamaherd.sources import (
        HmacSource,
        absent,
        body_digest,
        clip,
        first_absent,
        json_object,
        pick,
        unrouted,
    )
    from llamaherd.status import (
        FINAL,
        SETTABLE_STATES,
        agent_rows,
        agent_triggers,
        ago,
        budget_line,
        key_line,
        next_fire,
        run_dict,
        serving_status,
        until,
    )
    from llamaherd.store import JSONText, RunRow, Store, StoreError, Tables
    from llamaherd.tables import Column, print_table
    from llamaherd.triggers import agents_using
    from llamaherd.types import (
        SHARED_PATH,
        AdmissionCheck,
        CaseRun,
        ControlChannel,
        CredentialField,
        CredentialType,
        DoctorCheck,
        Emit,
        EmitResult,
        ExecResult,
        Expectation,
        Finding,
        Fix,
        Hold,
        LanguageSkill,
        Message,
        ModelConfig,
        Pricing,
        ProjectKey,
        Provider,
        Reply,
        RunContext,
        RunResult,
        Runtime,
        Sandbox,
        SandboxSpec,
        StagedFile,
        TableSet,
        Tool,
        ToolCall,
        ToolSpec,
        TriggerContext,
        TriggerEvent,
        TriggerInfo,
        TriggerType,
        Unmet,
        Usage,
        WebhookFilter,
        WebhookReply,
        WebhookSource,
    )
    from llamaherd.waits import MISSING, lookup

# Where each public name lives (``name`` or ``name:attribute`` when it is exported renamed).
# tests/foundation/test_public_api.py checks this against the imports above.
_SOURCES: dict[str, tuple[str, ...]] = {
    # The dashboard's Save as test and Replay: the same operations as `al record` / `al replay`.
    "llamaherd.agent_tests.record": ("record_run",),
    "llamaherd.agent_tests.replay": ("replay_run:replay", "replayed_dict"),
    # The dashboard's Reply and Say buttons: the same operations as `al reply` / `al say`.
    "llamaherd.agents": (
        "answer_suspension", "human_wait", "is_suspended", "queue_manual", "reply_to_run",
        "say_to_run", "set_agent_state", "state_of",
    ),
    "llamaherd.auth": (
        "authorized", "bearer_token", "control_token", "is_local", "json_body", "known_host",
        "require_token", "token_matches",
    ),
    "llamaherd.cli": ("AppContext", "environment_option", "pass_app"),
    "llamaherd.client": ("ControlClient",),
    "llamaherd.clock": ("clock", "host_id"),
    "llamaherd.credentials": (
        "CredentialError", "CredentialStore", "check_name", "credential_files", "format_ref",
        "parse_ref", "referenced_credentials:referenced",
    ),
    "llamaherd.durations": ("parse_duration",),
    "llamaherd.engine": ("Engine",),
    # Environments' layering (``llamaherd-deploy``'s `al env`, `al push`).
    "llamaherd.environments": (
        "Binding", "ENV_TOML", "bind_environment:bind", "check_environment_name:check_name",
        "deep_merge", "environment_file", "environment_names:names", "environments_dir",
        "is_deployed", "load_project", "read_env_toml", "read_environment",
        "resolve_environment:resolve",
    ),
    "llamaherd.errors": (
        "AuthError", "CommandFailed", "ConfigError", "ConfigWarning", "CredentialInvalid",
        "Fatal", "LlamaherdError", "ProviderError", "RateLimited", "SandboxBusy", "SandboxError",
        "SandboxLost", "Transient", "Unavailable",
    ),
    "llamaherd.execoutput": ("ExecOutput",),
    "llamaherd.logview": ("event_summary:summary",),
    "llamaherd.markup": ("escape_markup:escape",),
    # Runtimes on other machines: one multiplexed OpenSSH connection per host.
    "llamaherd.openssh": ("SshError", "SshMaster", "SshMasters", "SshTarget", "tar_archive"),
    # ``Registry``: ``TriggerType.bind(registry)`` gets it (a type built on other plugins' objects).
    "llamaherd.plugins": ("PluginInfo", "Registry", "describe_plugins"),
    "llamaherd.project": ("Agent", "Project", "read_project_text", "read_toml"),
    "llamaherd.providers": (
        "INVALID_ARGUMENTS", "ModelKey", "http_error", "http_timeout", "parse_retry_after",
        "post_json", "scrub",
    ),
    "llamaherd.local": ("scheduler_info",),
    "llamaherd.processes": ("pid_alive",),
    "llamaherd.schema": ("Problem", "validate_project"),
    "llamaherd.services": ("ServiceCredential", "call_service", "check_secret"),
    "llamaherd.shared_dir": ("shared_entries",),
    "llamaherd.signatures": ("DEFAULT_TOLERANCE", "fresh", "hmac_digest", "signature_matches"),
    "llamaherd.sources": (
        "HmacSource", "absent", "body_digest", "clip", "first_absent", "json_object", "pick",
        "unrouted",
    ),
    "llamaherd.status": (
        "FINAL", "SETTABLE_STATES", "agent_rows", "agent_triggers", "ago", "budget_line",
        "key_line", "next_fire", "run_dict", "serving_status", "until",
    ),
    "llamaherd.store": ("JSONText", "RunRow", "Store", "StoreError", "Tables"),
    "llamaherd.inbound": (
        "OverLimit", "admit_json:admit", "clean_text:clean", "json_too_deep:too_deep",
    ),
    # Listings: one header style, one record per line when piped (``al runs | grep``).
    "llamaherd.tables": ("Column", "print_table"),
    "llamaherd.triggers": ("agents_using",),
    "llamaherd.types": (
        "AdmissionCheck", "CaseRun", "ControlChannel", "CredentialField", "CredentialType",
        "DoctorCheck", "Emit", "EmitResult", "ExecResult", "Expectation", "Finding", "Fix",
        "Hold", "LanguageSkill", "Message", "ModelConfig", "Pricing", "ProjectKey", "Provider", "Reply",
        "RunContext", "RunResult", "Runtime", "SHARED_PATH", "Sandbox", "SandboxSpec",
        "StagedFile", "TableSet", "Tool", "ToolCall", "ToolSpec", "TriggerContext",
        "TriggerEvent", "TriggerInfo", "TriggerType", "Unmet", "Usage", "WebhookFilter",
        "WebhookReply", "WebhookSource",
    ),
    "llamaherd.waits": ("MISSING", "lookup"),
}  # fmt: skip
_WHERE: dict[str, tuple[str, str]] = {
    public: (module, attribute or public)
    for module, names in _SOURCES.items()
    for public, _, attribute in (name.partition(":") for name in names)
}

__all__ = ["__version__", "hookimpl", *sorted(_WHERE)]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'llamaherd.api' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__

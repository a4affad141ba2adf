"""The interfaces plugins implement, and the small value types that cross them.

Every registered object carries its own ``name``, a JSON-schema fragment (``schema``) and docs
(``description``). Core never imports a plugin module directly: it talks to these protocols.
A protocol's annotated attributes and methods are required; what a plugin *may* add is listed in
``OPTIONAL_MEMBERS``. Registration checks each object against both (``llamaherd.plugins``) and
refuses one that does not conform, with one warning.

Plugins import these (and everything else they use) from ``llamaherd.api``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from llamaherd.errors import (  # noqa: F401 (re-exported: part of this public module)
    Aborted,
    AuthError,
    CommandFailed,
    ConfigError,
    ConfigWarning,
    Conflict,
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

if TYPE_CHECKING:
    from peewee import Database, Model

    from llamaherd.plugins import Registry
    from llamaherd.project import Agent, Project
    from llamaherd.store.schema import Tables

# --------------------------------------------------------------------------- model conversation


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Message:
    """One normalised conversation message.

    role is "system", "user", "assistant" or "tool". Assistant messages may carry tool_calls;
    tool messages answer one call by tool_call_id.
    """

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    # Opaque provider state that must round-trip with the message (e.g. thinking blocks).
    provider_data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [tc.__dict__ for tc in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.is_error:
            data["is_error"] = True
        if self.provider_data:
            data["provider_data"] = self.provider_data
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=[ToolCall(**tc) for tc in data.get("tool_calls", [])],
            tool_call_id=data.get("tool_call_id"),
            is_error=data.get("is_error", False),
            provider_data=data.get("provider_data", {}),
        )


@dataclass
class ToolSpec:
    """A tool offered to the model: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class Usage:
    """Tokens of one model call. ``input_tokens`` counts every prompt token, the cached ones
    included: ``cached_input_tokens`` of them were read from the provider's prompt cache and
    ``cache_write_tokens`` written to it (both billed at their own rates). ``cost_usd`` is what
    the call cost: the provider sets it when its API reports a figure (OpenRouter); the model
    chain fills it in from the price table otherwise (None: no price known)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None


@dataclass(frozen=True)
class Pricing:
    """USD per million tokens. ``cached_input`` prices prompt-cache reads and ``cache_write``
    prompt-cache writes; each defaults to ``input`` when the model has no such rate."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    provider_data: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """A `[models.<name>]` entry of the project config, plus the key resolved for it."""

    name: str
    provider: str
    model: str
    auth_type: str | None = None
    thinking_level: str | None = None
    base_url: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    api_key: str | None = None
    pricing: Pricing | None = None  # the table's `pricing`: overrides the provider's prices
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- plugin objects


@dataclass
class CredentialField:
    name: str
    secret: bool = True
    description: str = ""


@runtime_checkable
class CredentialType(Protocol):
    """A kind of credential stored at ``<store>/<type>/<instance>/<field>``."""

    name: str
    description: str
    fields: list[CredentialField]

    def env(self, values: dict[str, str], path: Path) -> dict[str, str]:
        """Env vars exported in the sandbox. ``path`` is where this instance is staged."""
        ...

    def context(self, values: dict[str, str]) -> str:
        """Text for ``<credential-context>``: what is available, never the values."""
        ...


@dataclass
class TriggerEvent:
    """Something that should start (or resume) a run of an agent.

    kind is "scheduled", "manual", "webhook" or "agent". ``prompt`` is the trigger block of the
    user prompt. ``dedupe_key`` makes a repeated delivery a no-op.
    """

    agent: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    source: str | None = None
    dedupe_key: str | None = None
    call_id: int | None = None  # agent calls: the call record the callee's result settles
    rerun_count: int = 0  # scheduled reruns: how many times this run has been rerun
    recovery: dict[str, Any] | None = None  # requeued after a crash: the interrupted run's times


@dataclass
class EmitResult:
    """What became of an emitted event: the queued item's id (None when nothing was queued: a
    duplicate, a coalesced tick, a refusal, a drop or skip by flow control), the waiting runs it
    resumed, why the agent's state refused it (None when it did not) and what flow control did
    with it."""

    queued: int | None = None
    resumed: list[str] = field(default_factory=list)
    refused: str | None = None
    # What the agent's flow control did with it, when it did something: "debounced",
    # "dropped: ..." (rate limit), "skipped: ..." (singleton), "interrupted RUN", ...
    flow: str | None = None


Emit = Callable[[TriggerEvent], EmitResult]


@runtime_checkable
class TriggerContext(Protocol):
    """What a running trigger type gets from the scheduler in ``start(ctx)``: nothing more.

    Several schedulers may share one database; ``emit_once`` is how a trigger makes an event
    happen once across all of them (and across restarts)."""

    # The agents whose config uses this trigger type, as the scheduler runs them now: after a
    # live reload, the new set (read it again in ``reconfigure``).
    agents: Sequence[Agent]

    def clock(self) -> float:
        """Epoch seconds now (a fake clock in tests): use it, not ``time.time()``."""
        ...

    def emit(self, event: TriggerEvent, *, coalesce: bool = False) -> EmitResult:
        """Queue ``event`` durably (before returning) and offer it to waiting runs.
        ``coalesce``: not queued when an item of the same agent and kind is still queued."""
        ...

    def emit_once(
        self, key: str, tick: float, event: TriggerEvent, *, coalesce: bool = False
    ) -> EmitResult | None:
        """``emit`` unless ``(key, tick)`` of this trigger type was claimed before; the claim and
        the queued item are one transaction, so a crash never loses or doubles a tick. None when
        it was claimed already (another scheduler, or before a restart)."""
        ...

    def last_tick(self, key: str) -> float | None:
        """The latest tick claimed for ``key`` by this trigger type (where catch-up resumes)."""
        ...

    def sleep(self, wake: threading.Event, until: float | None) -> bool:
        """Sleep until ``wake`` is set or ``clock()`` reads ``until`` (None: until woken);
        whether ``wake`` ended it. Use it, not ``wake.wait(seconds)``: a fake clock in tests
        moves time without changing when a trigger wakes (the sleep also ends when such a
        clock is set, as after a real clock's step)."""
        ...


@runtime_checkable
class TriggerType(Protocol):
    """A source of runs: ``schedule``/``every`` (cron), ``[[webhooks]]``, ``al run``, calls.

    ``schema`` holds the properties it adds to an agent's ``config.toml``; an agent whose config
    sets one of them uses this trigger (``TriggerContext.agents``). Optional members, each with
    a default when absent (``OPTIONAL_MEMBERS``): ``kind`` (the ``TriggerEvent.kind`` of its
    events; default ``name``), ``while_hibernating`` (its events still start runs of a
    hibernating agent; default False, so a hibernating agent refuses them and drops those
    queued), ``prompt_block(trigger)``, ``preview(agent, payload)``, ``validate(agent)``,
    ``matches(wait_filter, event)``, ``next_fire(agent, now)``, ``bind(registry)``,
    ``reconfigure(ctx)`` (a live reload changed the config of its agents: ``ctx.agents`` is
    the new set; without it the scheduler calls ``stop()`` then ``start(ctx)`` again),
    ``case_event(agent, spec)`` and ``case_trigger(trigger)`` (a test case's ``[trigger]`` as an
    event, a stored run's trigger as a ``[trigger]``: ``al test``, ``al record``). How an
    agent's triggers read in ``al stat`` and the dashboard is the ``describe_triggers`` hook's."""

    name: str
    description: str
    schema: dict[str, Any]

    def start(self, ctx: TriggerContext) -> None:
        """Begin producing events for ``ctx.agents`` (return at once; run in a thread)."""
        ...

    def stop(self) -> None:
        """Stop producing events: at scheduler shutdown, and before ``start`` again when a live
        reload changed its agents and it has no ``reconfigure``."""
        ...


@dataclass
class TriggerInfo:
    """One trigger of an agent, as an operator sees it (``describe_triggers``): its ``kind``
    (``schedule``, ``every``, ``webhook``, ``file_watch``...), a one-line ``summary``, the
    settings that narrow it (``details``: a webhook's filters, watched paths) and, when the
    trigger can tell, its ``next_fire`` (epoch seconds)."""

    kind: str
    summary: str
    details: dict[str, str] = field(default_factory=dict)
    next_fire: float | None = None


@dataclass
class ExecResult:
    exit_code: int
    output: str
    timed_out: bool = False
    duration: float = 0.0


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place where a run's tool calls execute. It never holds the model session."""

    id: str
    workdir: str  # path of the run's working dir as seen inside the sandbox

    def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult: ...

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def get_file(self, path: str) -> bytes: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def cleanup(self) -> None: ...

    def handle(self) -> dict[str, Any]:
        """JSON-able data that lets ``Runtime.attach`` find this sandbox after a restart."""
        ...


@dataclass
class StagedFile:
    """One file a runtime writes for a run, at ``<staged root>/<path>``: a credential, or a
    file of the project's ``shared/`` directory."""

    path: str  # credentials: "<type>/<instance>/<field>", each part a checked single segment
    content: bytes  # a credential: the value plus a newline, as in the credential store
    mode: int  # a credential: its type's ``file_modes`` entry, else 0o400


# Where a sandbox shows the project's shared/ files, read-only (Action Llama's path).
SHARED_PATH = "/app/static/shared"


@dataclass
class SandboxSpec:
    """What a runtime needs to start a sandbox for one run."""

    run_id: str
    agent: Agent
    project: Project
    credential_files: list[StagedFile]  # only the agent's declared, sandbox-staged credentials
    env: dict[str, str]  # env for every exec: credential env, AL_* gateway vars
    bin_dir: Path  # host dir holding the language-skill shell commands
    timeout: float
    # Given the staged credentials root as seen inside the sandbox, the env vars the declared
    # credential types export (GITHUB_TOKEN, GIT_SSH_COMMAND, ...).
    credential_env: Callable[[str], dict[str, str]] = lambda root: {}
    gateway_socket: str | None = None  # host path of the gateway's unix socket (containers)
    # The project's shared/ files (paths relative to it): read-only at SHARED_PATH.
    shared_files: list[StagedFile] = field(default_factory=list)
    # The project's store, for a runtime that keeps state of its own (``register_tables``): a
    # host pool's leases. None where no store is at hand.
    store: Any = None


@runtime_checkable
class Runtime(Protocol):
    name: str
    description: str
    schema: dict[str, Any]  # properties of an agent's [runtime] table for this type

    def prepare(self, agent: Agent, project: Project) -> None:
        """Make the agent runnable (build image, check user); raise SandboxError if not."""
        ...

    def start(self, spec: SandboxSpec) -> Sandbox: ...

    def attach(self, handle: dict[str, Any], spec: SandboxSpec) -> Sandbox | None:
        """Re-attach to a sandbox recorded before a restart; None when it is gone."""
        ...

    def cleanup_orphans(self, live_run_ids: set[str], project: Project) -> int:
        """Remove ``project``'s sandboxes that no live run owns; return how many. Sandboxes of
        other projects on the same host are never touched."""
        ...


@runtime_checkable
class RunContext(Protocol):
    """One run as a plugin sees it: in a language skill's ``preamble(run)`` and tool handlers,
    and in the ``run_started`` / ``run_finished`` hooks. In ``al prompt`` previews ``sandbox``
    is None and nothing is logged."""

    run_id: str
    agent: Agent
    # kind, payload, prompt, source, queued_at, claimed_at (and recovery after a crash)
    trigger: dict[str, Any]
    sandbox: Sandbox | None  # while the run is active

    @property
    def project(self) -> Project: ...

    def redact(self, text: str) -> str:
        """``text`` with the run's secret values masked (do this before storing or logging)."""
        ...

    def log(self, type: str, data: dict[str, Any] | None = None) -> None:
        """Record a structured run event (redacted); ``al logs`` and the dashboard show it."""
        ...


@dataclass
class RunResult:
    """What ``run_finished`` hooks get: the final state and what the run produced."""

    state: str  # done, error, timeout, killed
    exit_code: int
    reason: str | None = None
    return_value: Any = None
    text: str = ""  # the model's last text


@dataclass
class ControlChannel:
    """A way to a remote scheduler's control API, opened by a plugin for ``al ... --env NAME``
    (``open_control_channel``).

    The CLI speaks HTTP to ``socket``, a unix socket on this machine that only this user can
    reach (e.g. the local end of an SSH forward), with ``token`` as the bearer token; ``where``
    names the remote in messages ("deploy@example.com:/opt/action-llama"). ``close()`` tears
    the channel down; the CLI calls it once, when the command ends.
    """

    socket: str
    token: str
    where: str
    close: Callable[[], None] = field(default=lambda: None)


@dataclass
class Tool:
    """A language-skill tool: offered to the model and callable as a shell command."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[RunContext, dict[str, Any]], Any]  # -> JSON-able result


@runtime_checkable
class LanguageSkill(Protocol):
    name: str
    category: str
    tools: list[Tool]

    def preamble(self, run: RunContext) -> str:
        """Concise instructions for the model about this skill's tools ("" adds nothing)."""
        ...


@runtime_checkable
class Provider(Protocol):
    """A model API. Optional members (``OPTIONAL_MEMBERS``): ``key_env``, ``key_required``,
    ``prices`` (model id -> ``Pricing``, the defaults each call's ``cost_usd`` is computed from;
    ``llamaherd.pricing`` says how ids match) and ``validate(model)`` (problems of a
    ``[models.<name>]`` table that its schema cannot express, for ``al validate`` and run start).
    """

    name: str
    description: str
    schema: dict[str, Any]  # extra keys allowed in a [models.<name>] table for this provider
    credential_type: str | None  # credential type holding the key, if any

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        """One model turn. Raise RateLimited / AuthError / Transient / Fatal on failure."""
        ...


@dataclass(frozen=True)
class WebhookFilter:
    """A filter key a webhook source adds to ``[[webhooks]]`` entries and ``wait_for_trigger``
    filters (``channels = ["C0123"]``): it matches when any of the entry's values equals the
    event's normalised ``field`` (any item of it, for a list field)."""

    field: str  # the normalised field of ``parse``'s result it compares with
    description: str = ""  # shown in `al schema` and the configuration reference
    glob: bool = False  # values may be fnmatch patterns ("acme/*")
    fold: bool = False  # compared case-insensitively
    # An event without the field passes (Discord's ``commands`` do not filter a button click).
    skip_when_absent: bool = False


@dataclass
class WebhookReply:
    """An HTTP answer a webhook source gives instead of the default JSON receipt: a challenge
    (Slack's ``url_verification``, X's CRC), a protocol reply (Discord's PONG, a deferred
    interaction response). ``body`` is sent byte for byte."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"

    @classmethod
    def json(cls, value: Any, status: int = 200) -> WebhookReply:
        """Compact JSON, as the services document their expected answers."""
        import json

        return cls(status, json.dumps(value, separators=(",", ":")).encode())


@runtime_checkable
class WebhookSource(Protocol):
    """A webhook source type (``[webhooks.<name>] type = ...``): verifies and parses deliveries.

    Optional members (``OPTIONAL_MEMBERS``): ``filters`` (its ``[[webhooks]]`` filter keys),
    ``secret_field``, ``configured(table)``, ``request_headers(...)``, ``renew(body, delivery)``,
    ``reply(fields, routed)``, ``answer_get(query, secrets)``, ``signs_with_private_key``,
    ``dedupe_bodies``."""

    name: str
    description: str
    schema: dict[str, Any]  # extra keys of a [webhooks.<name>] table
    credential_type: str | None

    def verify(self, headers: dict[str, str], body: bytes, secrets: list[str]) -> bool: ...

    def parse(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        """Return {"event", "action", "delivery", "payload", ...} normalised fields; ValueError
        for a body that is no delivery at all (400). A delivery acknowledged and routed to no
        agent carries ``ignore`` (a ping, a challenge: recorded as ``ignored: <event>``) or
        ``lacks``: what its payload lacks that its event needs (``"repository"``: recorded as
        ``incomplete payload: no repository``, answered 200, as Action Llama drops it)."""
        ...


@dataclass(frozen=True)
class TableSet:
    """A plugin's own tables in the store (``register_tables``): its receipts, its state.

    ``define(db)`` declares the plugin's peewee models on the database it is given (each with
    ``class Meta: database = db``) and returns them; core calls it for each store it opens.
    ``version`` is the schema those models describe (start at 1). Opening a store creates tables
    that are missing (an existing table of the same name is adopted as the set's version 1, and
    brought forward by its steps) and, when the
    ``meta`` table records an older version for ``name``, runs each of ``migrations``
    (``(version, step(db, tables))``, ascending) above it, in one transaction with the new
    stamp. A step keeps every row and uses portable schema operations (SQLite and PostgreSQL);
    a new table needs no step. ``prune(tables, cutoff)``, when given, deletes rows older than
    ``cutoff`` (epoch seconds, ``historyRetentionDays`` ago) and returns how many; the
    scheduler calls it with core's own upkeep.

    A plugin reaches the bound models with ``store.tables(name)`` (``app.state.engine.store``
    in a route), writes them inside ``store.atomic()`` and reads them inside ``store.guard()``;
    ``store.clock()`` is the time to stamp rows with. peewee is then the plugin's own
    dependency."""

    name: str
    version: int
    define: Callable[[Database], Sequence[type[Model]]]
    migrations: Sequence[tuple[int, Callable[[Database, Tables], None]]] = ()
    prune: Callable[[Tables, float], int] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"table set {self.name!r}: version must be an integer >= 1")
        if not callable(self.define) or (self.prune is not None and not callable(self.prune)):
            raise ValueError(f"table set {self.name!r}: define and prune must be functions")
        steps = [version for version, _ in self.migrations]
        if steps != sorted(set(steps)) or any(not 1 < v <= self.version for v in steps):
            raise ValueError(
                f"table set {self.name!r}: migration versions must ascend, each above 1 and "
                f"at most {self.version} (got {steps})"
            )


@runtime_checkable
class ProjectKey(Protocol):
    """A top-level key of the project ``config.toml`` that a plugin acts on
    (``register_project_keys``): ``[telemetry]`` of the otel plugin. ``schema`` is the JSON
    Schema of the key's value; it replaces core's schema of a key of the same name."""

    name: str
    description: str
    schema: dict[str, Any]


@dataclass
class Fix:
    """What ``al doctor --fix`` can do about a finding. ``description`` is asked as a question
    ("build image al-agent:latest from node:20-alpine?"); ``apply()`` does it and returns one
    line saying what it did, or raises ``LlamaherdError``. An ``interactive`` fix asks for
    input itself (a credential's fields): ``--yes`` leaves it to the user."""

    description: str
    apply: Callable[[], str]
    interactive: bool = False


@dataclass
class Finding:
    """One line of ``al doctor``: what was checked (``subject``), ``status`` (``ok``,
    ``warning`` or ``error``: only errors make ``al doctor`` exit 1), a one-line ``message``
    (never a secret) and, when it can be fixed here, the ``fix``."""

    subject: str
    status: str
    message: str
    fix: Fix | None = None

    @classmethod
    def ok(cls, subject: str, message: str) -> Finding:
        return cls(subject, "ok", message)

    @classmethod
    def warning(cls, subject: str, message: str, fix: Fix | None = None) -> Finding:
        return cls(subject, "warning", message, fix)

    @classmethod
    def error(cls, subject: str, message: str, fix: Fix | None = None) -> Finding:
        return cls(subject, "error", message, fix)


@runtime_checkable
class DoctorCheck(Protocol):
    """A check of ``al doctor`` (``register_doctor_checks``): a runtime's daemon and images, a
    runtime's OS users, a telemetry endpoint. ``check`` may be slow (network, a daemon): checks
    run in parallel. One that raises is reported as an error finding."""

    name: str
    description: str

    def check(self, project: Project, registry: Registry) -> list[Finding]:
        """What this check finds about ``project`` (an empty list: nothing to check here)."""
        ...


@runtime_checkable
class AdmissionCheck(Protocol):
    """A reason to start none of an agent's queued runs for now (``register_admission_checks``):
    core's budgets, a plugin's host pool or maintenance window. The dispatcher asks before each
    claim, so ``hold`` must be quick (a store read at most); one that raises holds nothing (a
    warning names it)."""

    name: str
    description: str

    def hold(self, agent: Agent, store: Any, now: float) -> Hold | str | None:
        """Why ``agent`` starts nothing now (shown by ``al stat``), or None. ``store`` is the
        project's store, ``now`` the store's clock (epoch seconds). A ``Hold`` with ``until``
        has the scheduler ask again at that moment; a plain reason (or ``until`` None) is asked
        again when something changes (a trigger, a run's end, a reload) and every few real
        seconds (``llamaherd.engine.HOLD_RECHECK``) while queued runs wait."""
        ...


@dataclass(frozen=True)
class Hold:
    """An admission check's answer: why an agent's queued runs wait, and until when they may
    (epoch seconds of the store's clock: a budget period's end, a host's retry window), when
    that is known."""

    reason: str
    until: float | None = None


@dataclass
class Unmet:
    """One expectation of a test case a run did not meet (``Expectation.check``): ``message``
    is one line saying what was expected and what happened; ``details`` are the run's relevant
    lines (the commands it ran, the closest candidate with what differs); ``item`` is the index
    of the entry that failed in a list-valued expectation (``expect.commands[2]``)."""

    message: str
    details: list[str] = field(default_factory=list)
    item: int | None = None


@dataclass
class CaseRun:
    """What a test case's run did, as its expectations see it (``Expectation.check``).

    ``tool_calls`` are ``{"turn", "name", "arguments", "result", "is_error"}`` in order (the
    arguments and results as stored: credential values masked); ``commands`` are the hook
    commands and the model's bash calls in order, ``{"phase": "pre" | "post" | "bash",
    "command", "exit_code", "output"}``; ``files`` maps each path the case asks about to its
    bytes at the end of the run (None: absent); ``transitions`` the run's states in order;
    ``waits`` its ``wait_for_trigger`` calls ``{"filter", "timeout"}``; ``calls`` the agents it
    called ``{"agent", "context", "answered"}``; ``events`` every run event (``al logs RUN
    --json``)."""

    run_id: str
    agent: str
    state: str
    exit_code: int | None
    reason: str | None = None
    return_value: Any = None
    status: str | None = None
    text: str = ""  # the model's last text
    texts: list[str] = field(default_factory=list)  # every text the model wrote, in order
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes | None] = field(default_factory=dict)
    transitions: list[str] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_turns: int = 0  # turns whose price was unknown (not in cost_usd)
    events: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class Expectation(Protocol):
    """A kind of expectation of an agent test case (``register_expectations``): the key
    ``name`` of a case's ``[expect]`` table (``commands``, ``return``, ``max_turns``...).
    ``schema`` is the JSON Schema of its value there; ``check(expected, run)`` returns what the
    run did not meet, an empty list when it met it. Core's own expectations register through
    the same hook (``llamaherd.agent_tests.expectations``)."""

    name: str
    description: str
    schema: dict[str, Any]

    def check(self, expected: Any, run: CaseRun) -> list[Unmet]:
        """The unmet parts of ``expected`` (the case's value, valid against ``schema``)."""
        ...


# --------------------------------------------------------------------------- what a plugin may add


def fragment(obj: Any) -> tuple[dict[str, Any], list[str]]:
    """Properties and required keys of a registered object's ``schema`` fragment."""
    schema = getattr(obj, "schema", None) or {}
    if (
        schema.get("type") == "object"
        or isinstance(schema.get("properties"), dict)
        and (
            set(schema)
            <= {"properties", "required", "description", "title", "additionalProperties"}
        )
    ):
        return dict(schema.get("properties", {})), list(schema.get("required", []))
    return dict(schema), []


METHOD = "method"  # an OPTIONAL_MEMBERS entry that must be callable

# Members a registered object may have beyond its protocol's, and what each must be. Core uses
# ``getattr(obj, member, default)`` for these; registration refuses an object whose optional
# member is of the wrong kind.
OPTIONAL_MEMBERS: dict[type, dict[str, Any]] = {
    TriggerType: {
        "kind": str,  # TriggerEvent.kind of its events (default: name)
        "while_hibernating": bool,  # its events run a hibernating agent (default False)
        "prompt_block": METHOD,  # (trigger: dict) -> str: the run's trigger block
        "preview": METHOD,  # (agent, payload) -> TriggerEvent: what `al prompt` shows
        "validate": METHOD,  # (agent) -> list[ConfigError | ConfigWarning]
        "matches": METHOD,  # (wait_filter, event) -> bool, for wait_for_trigger
        "next_fire": METHOD,  # (agent, now) -> float | None, for `al stat`
        # (registry) -> None: called once the registry holding it is complete, for a type built
        # on other plugins' objects (the webhooks trigger on every installed webhook source).
        "bind": METHOD,
        # (ctx) -> None: a live reload changed the config of the agents using it (added,
        # removed, their keys of its schema edited); ctx.agents is the new set. Without it the
        # scheduler calls stop() then start(ctx) again.
        "reconfigure": METHOD,
        # (agent, spec) -> TriggerEvent: the event a test case's [trigger] table (or one of its
        # [[events]]) stands for (``spec``: the table, its payload file read); without it the
        # case's payload and prompt are the event's as written (``llamaherd.agent_tests``).
        "case_event": METHOD,
        # (trigger) -> dict: the [trigger] table that stands for a stored run's trigger, for
        # `al record` (kind, payload, prompt, source, ...: the run's); its ``case_event``
        # must give that run's event back.
        "case_trigger": METHOD,
    },
    WebhookSource: {
        "filters": dict,  # filter key -> WebhookFilter: its keys in [[webhooks]] and waits
        "secret_field": str,  # field of credential_type holding the secret (default "secret")
        "configured": METHOD,  # (table) -> WebhookSource set up for one [webhooks.<name>]
        "request_headers": METHOD,  # (body, event, delivery, secret) -> headers a sender sends
        # (body, delivery) -> bytes: a recorded body made a new delivery, for a test: the
        # timestamp signed inside it set to now (Linear's webhookTimestamp), its delivery id
        # set to ``delivery`` (Slack's event_id, a Discord interaction's id).
        "renew": METHOD,
        # (fields, routed) -> WebhookReply | None: the answer to a verified delivery instead of
        # the default receipt; ``routed`` is None for an ignored one (a challenge, a ping), else
        # the receipt (agents, queued, duplicate, ...).
        "reply": METHOD,
        "answer_get": METHOD,  # (query, secrets) -> WebhookReply | None: GET /webhooks/<name>
        # The sender signs with a private key and the stored credential holds only the public
        # key (Discord): `al webhooks test` needs the private key of a test key pair.
        "signs_with_private_key": bool,
        # Every body is unique to its event (ids, times) and only the body is signed (GitHub,
        # Sentry, Linear): a verified body the source delivered before, under any delivery id,
        # is dropped as a duplicate (a replay).
        "dedupe_bodies": bool,
    },
    Runtime: {
        "validate": METHOD,  # (agent, project) -> list[ConfigError]
        # (agent, store) -> list[str]: where the agent's runs go now, one line each, for
        # `al stat` and the dashboard ("build-1: down since 12:03: ..."); [] for nothing.
        "status": METHOD,
    },
    # Kill the commands running now, the sandbox stays (`al say`). Not registered, so not
    # checked at registration: the session calls it when present.
    Sandbox: {"interrupt": METHOD},
    CredentialType: {
        "validate": METHOD,  # (values) -> str: `al creds test`; raises CredentialInvalid
        "sandbox": bool,  # False: never staged into a run (model keys, webhook secrets)
        "file_modes": dict,  # field -> mode of its staged file (default 0400)
    },
    LanguageSkill: {"description": str},
    Provider: {
        "key_env": str,  # env var holding the key when no credential is stored
        "key_required": bool,  # False: a local server that takes no key
        "prices": dict,  # model id -> Pricing: the defaults cost_usd is computed from
        "validate": METHOD,  # (model: ModelConfig) -> list[str]: problems a schema cannot say
    },
}

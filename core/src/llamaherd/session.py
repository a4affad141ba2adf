"""The LLM session of one run: model turns and tool calls, in the calling thread.

The session runs in the engine process, never in the sandbox: every tool call executes inside
the sandbox through ``Sandbox.exec`` / ``get_file`` / ``put_file``. Its whole state lives in the
transcript (a ``meta`` entry first, then the messages), checkpointed after every turn, so a run
can park for ``wait_for_trigger`` or survive a restart and continue from the last checkpoint.

The turn tools (``respond``, ``say``, ``ask``) are the session's own: they talk to a human, not
to the sandbox. In ``interactive`` loop mode ``respond`` (or a reply with no tool call) ends the
turn and ``ask`` parks the run until a human answers (``al reply``); in ``autonomous`` mode
nobody answers. ``interrupt(message)`` (``al say``) cuts the current turn short from another
thread: the model request in flight is aborted, the tool calls not yet run get placeholder
results, and the message becomes the next user input.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from llamaherd.budgets import BUDGET_EXIT, RunBudget
from llamaherd.errors import Aborted, AuthError, LlamaherdError, ProviderError, SandboxLost
from llamaherd.file_tools import FILE_HANDLERS, FILE_TOOLS
from llamaherd.providers import INVALID_ARGUMENTS, Abort
from llamaherd.redact import MASK
from llamaherd.run_events import publish
from llamaherd.store.connection import StoreError
from llamaherd.store.schema import dumps
from llamaherd.types import Message, Reply, Sandbox, ToolCall, ToolSpec, Usage
from llamaherd.write_budget import (
    CUT_RESERVE,
    OUTPUT_OVER_BUDGET,
    SPENT,
    TRANSCRIPT_COPIES,
    WriteBudget,
)

if TYPE_CHECKING:
    from llamaherd.engine import Engine
    from llamaherd.project import Agent, Project
    from llamaherd.redact import Redactor
    from llamaherd.store import Store

log = logging.getLogger("llamaherd.session")

MAX_OUTPUT = 30_000
# A run whose record cannot be written (a full disk) waits and writes it again, from the first
# delay doubling up to the last, for as long as it is not stopped.
RECORD_RETRY = (0.25, 5.0)
DEFAULT_BASH_TIMEOUT = 300.0
AUTH_FAILURE_LIMIT = 3
# Tool output that means a credential was refused (counted toward the auth-failure limit).
AUTH_PATTERN = re.compile(
    r"bad credentials|permission denied|\b401 unauthorized\b|\b403 forbidden\b"
    r"|\bHTTP/\d(?:\.\d)?\s+40[13]\b|\b(?:status|code)[ :=]+40[13]\b",
    re.IGNORECASE,
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What one run may set with setenv (from the model's bash calls, hooks and scripts). Every value
# is masked in what is stored for the rest of the run, and the model's bash calls get them all
# as environment variables, which execve must accept: Linux refuses one NAME=value over 128 KiB
# and an environment plus arguments over about 2 MiB ("Argument list too long").
MAX_ENV_VALUE = 64 * 1024  # bytes in one value
MAX_ENV_SETTINGS = 500  # distinct NAME=value pairs one run may set, counted once each
MAX_ENV_BYTES = 256 * 1024  # bytes of those pairs together
# Running totals in the transcript's meta entry. cost_usd sums the turns whose price was known
# (llamaherd.pricing); unpriced_turns counts the others, so a total is never silently partial.
COUNTERS = (
    "turns",
    "auth_failures",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "unpriced_turns",
)
T = TypeVar("T")
HUMAN = "human"  # wait-filter type of a run parked until a human answers (ask, respond)
INTERRUPTED = (
    "not run: a human interrupted this turn with a message (next); call it again if you "
    "still need it"
)
CUT_SHORT = "ended early: a human interrupted this turn with a message (next)"
OUTPUT_CUT = (
    "output cut: this run has written as much as one run may; keep large output in files "
    "and read what you need"
)
# The marker of model text and other messages (and the key of tool-call arguments) kept cut
# past the run's write budget.
TRANSCRIPT_CUT = "cut: this run has written as much as one run may; the rest is not kept"
ARGUMENTS_CUT = "arguments_cut"
KEPT_AT_STOP = 300  # characters of each message kept once the cut ones are past their reserve
TRANSCRIPT_FULL = (
    f"write budget: {SPENT}, and its transcript holds {CUT_RESERVE:,} bytes of cut messages "
    "past it: the run stops"
)


# ------------------------------------------------------------------------------ shared types


@dataclass
class ActiveRun:
    """Core's ``RunContext`` (``llamaherd.types``): what a tool handler, a gateway endpoint or a
    lifecycle hook gets for one run. Core's own skills also reach the engine and the store."""

    run_id: str
    agent: Agent
    engine: Engine | None  # None in `al prompt` previews
    store: Store | None
    sandbox: Sandbox | None = None  # while the run is active
    # Over the run's credential values, model keys and run token: masked everywhere.
    redactor: Redactor | None = None
    # Values the run set with setenv, in order: masked in everything stored (never in what the
    # model reads back: an ordinary value, a branch name, must stay usable).
    env_secrets: list[str] = field(default_factory=list)
    # The NAME=value pairs counted against the run's setenv limits (MAX_ENV_*), and their bytes.
    _env_pairs: set[tuple[str, str]] = field(default_factory=set, repr=False, compare=False)
    _env_bytes: int = field(default=0, repr=False, compare=False)
    # The stored redactor: for which base redactor and how many env_secrets it was made.
    _stored: tuple[int, int, Redactor] | None = field(default=None, repr=False, compare=False)
    trigger: dict[str, Any] = field(default_factory=dict)
    loop_mode: str = "autonomous"  # or "interactive": a human takes part (agent `loop_mode`)
    # The agent state this run set for its agent (set_state): the session ends the run on it.
    state_change: str | None = None
    # Done when the tool call (or hook command) running now ends: the `state` shell command.
    after_call: list[Callable[[], None]] = field(default_factory=list)
    # Set when the run is being stopped (the runner's); None: a store write is not retried.
    stopped: threading.Event | None = None
    # What the run may still write (``llamaherd.write_budget``): the runner's, shared by every
    # ActiveRun of the run in this process; taken on first use.
    _writes: WriteBudget | None = field(default=None, repr=False, compare=False)

    @property
    def project(self) -> Project:
        return self.agent.project

    def row(self) -> Any:
        """The run's current RunRow."""
        return self.store.get_run(self.run_id)

    def keep_env(self, name: str, value: str) -> None:
        """Count ``NAME=value`` against the run's setenv limits and mask ``value`` in
        everything stored from now on; a LlamaherdError naming the limit when it does not fit
        (nothing is counted then). Setting a pair already counted costs nothing."""
        if (name, value) in self._env_pairs:
            return
        size = len(name) + 1 + len(value.encode("utf-8", "surrogatepass"))
        if size - len(name) - 1 > MAX_ENV_VALUE:
            raise LlamaherdError(
                f"setenv {name}: the value is {size - len(name) - 1:,} bytes; "
                f"one value may have at most {MAX_ENV_VALUE:,} bytes"
            )
        if len(self._env_pairs) >= MAX_ENV_SETTINGS:
            raise LlamaherdError(
                f"setenv {name}: this run has already set {MAX_ENV_SETTINGS} values, "
                "the most one run may set"
            )
        if self._env_bytes + size > MAX_ENV_BYTES:
            raise LlamaherdError(
                f"setenv {name}: this run's values would reach {self._env_bytes + size:,} bytes; "
                f"one run may set at most {MAX_ENV_BYTES:,} bytes in all"
            )
        self._env_pairs.add((name, value))
        self._env_bytes += size
        if value not in self.env_secrets:
            self.env_secrets.append(value)

    @property
    def stored_redactor(self) -> Redactor:
        """Masks what is written to the store: credentials and setenv values. Rebuilt only
        when the base redactor changes; a new setenv value is added to the last one."""
        from llamaherd.redact import Redactor

        base, count = id(self.redactor), len(self.env_secrets)  # env_secrets only grows
        stored = self._stored
        if stored is None or stored[0] != base:
            stored = (base, 0, self.redactor or Redactor())
        if stored[1] != count:
            stored = (base, count, stored[2].plus(self.env_secrets[stored[1] :]))
        self._stored = stored
        return stored[2]

    def redact(self, text: str) -> str:
        """``text`` as it may be stored or shown: credential and setenv values masked."""
        return self.stored_redactor.redact(text) if self.redactor or self.env_secrets else text

    def redact_obj(self, obj: Any) -> Any:
        return self.stored_redactor.redact_obj(obj) if self.redactor or self.env_secrets else obj

    def redact_for_model(self, text: str) -> str:
        """``text`` as the model may read it: credential values masked, setenv values kept."""
        return self.redactor.redact(text) if self.redactor else text

    def log(self, type: str, data: dict[str, Any] | None = None) -> None:
        """A structured run event, redacted; then offered to ``run_event`` plugins. Dropped
        once the run's write budget is spent."""
        data = self.redact_obj(data or {})
        if not self.within_budget(len(json.dumps(data, separators=(",", ":"), default=str))):
            return
        self._add_event(type, data)

    def _add_event(self, type: str, data: dict[str, Any]) -> None:
        self.record(lambda: self.store.add_event(self.run_id, type, data))
        publish(self, type, data)

    @property
    def write_budget(self) -> WriteBudget:
        if self._writes is None:
            if self.engine is not None:
                self._writes = self.engine.runner.write_budget(self.run_id)
            else:  # no engine (a preview, a test): from what the store holds of the run
                held = self.store.run_writes(self.run_id) if self.store is not None else ()
                self._writes = WriteBudget(*held)
        return self._writes

    def within_budget(self, size: int, records: int = 1) -> bool:
        """Whether a write of ``records`` records and ``size`` bytes fits what the run may
        still write (counting it if so); the first that does not records the one notice.
        Every store write a run causes is charged here first (``llamaherd.write_budget``)."""
        if self.write_budget.take(size, records):
            return True
        if self.write_budget.notice_due():
            message = self.write_budget.notice()
            log.warning("run %s: %s", self.run_id, message)
            notice = {"level": "warn", "origin": "scheduler", "event": "write_budget"}
            self._add_event("write_budget", {**notice, "message": message})
        return False

    def record(self, write: Callable[[], T]) -> T:
        """``write()`` to the store; when the store cannot take it (a full disk, a lock held
        too long), wait and write it again for as long as the run is not stopped: a run that
        could not record its progress has not died, and must not be rerun as if it had."""
        delay, longest = RECORD_RETRY
        failing = False
        while True:
            try:
                result = write()
            except StoreError as exc:
                if self.stopped is None or self.stopped.is_set():
                    raise
                if not failing:
                    log.warning("run %s: could not record (%s); retrying", self.run_id, exc)
                failing = True
                self.stopped.wait(delay)
                delay = min(delay * 2, longest)
                continue
            if failing:
                log.warning("run %s: recording again", self.run_id)
            return result

    def settle_after_call(self) -> None:
        """Run what was deferred to the end of the tool call or hook command that just ended."""
        actions, self.after_call[:] = list(self.after_call), []
        for action in actions:
            action()


@dataclass
class Deferred:
    """A tool result that arrives later (``wait_for_trigger``): the session parks the run.

    ``data`` is kept with the pending call; the run is continued by ``Session.run(resume=...)``
    with ``{"result": value, "is_error": bool}``.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """How a session stopped: done, error, waiting (a Deferred is pending) or cancelled."""

    state: str
    reason: str | None = None
    text: str = ""
    deferred: Deferred | None = None
    exit_code: int | None = None  # when not the state's own (a budget stop)


# ------------------------------------------------------------------------------ built-in tools

# Action Llama's default harness offers bash, read, write, edit, grep, find and ls.
BUILTIN_TOOLS = [
    ToolSpec(
        "bash",
        "Run a shell command (bash) in the sandbox. The working directory and variables set "
        "with `setenv NAME VALUE` carry over to later calls. Output is truncated at "
        f"{MAX_OUTPUT} characters.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to run."},
                "timeout": {"type": "number", "description": "Seconds before it is killed."},
            },
            "required": ["command"],
        },
    ),
    *FILE_TOOLS,
]


def _text_tool(name: str, key: str, description: str) -> ToolSpec:
    return ToolSpec(
        name,
        description,
        {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]},
    )


# The turn tools: the session answers them itself (see the module docstring).
TURN_TOOLS = [
    _text_tool(
        "respond",
        "message",
        "Give your answer or result to the human. In interactive mode this ends your turn: "
        "the human's next message comes back as new input.",
    ),
    _text_tool("say", "message", "Report progress to the human; your turn goes on."),
    _text_tool(
        "ask",
        "question",
        "Ask the human a question and wait for the answer (interactive mode only).",
    ),
]


def offered_tools(skill_tools: Mapping[str, Any]) -> list[ToolSpec]:
    """What every model turn offers: the built-in tools, the turn tools, then the language
    skills' ``Tool`` objects (by name) in their order."""
    skills = [ToolSpec(t.name, t.description, t.parameters) for t in skill_tools.values()]
    return BUILTIN_TOOLS + TURN_TOOLS + skills


def truncate(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep the head and the tail of long output, with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    # Room for the marker: the result fits in ``limit``, so truncating it again (the bash
    # tool truncates, then the session truncates every tool result) keeps the first count.
    half = max(0, limit - 48) // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


# The first line of every tool call and hook command: which pipe its output goes to, so the
# `state` command can tell it is captured (`x=$(state off)`, a redirect) and only read the
# state then. `$$` is the outer shell even inside `$(...)`.
MARK_STDOUT = 'AL_CALL_STDOUT="$(readlink /proc/$$/fd/1 2>/dev/null)"; export AL_CALL_STDOUT\n'


def wrap_command(command: str, cwd: str, nonce: str) -> str:
    """A bash script that runs ``command`` in ``cwd`` and reports the final cwd and setenv vars.

    An EXIT trap prints ``<nonce>CWD<path>`` and ``<nonce>ENV<name>=<base64 value>`` lines after
    the command's own output, whatever way it ends (``exit`` included).
    """
    script = f"""\
__al_done() {{ __al_rc=$?; printf '\\n{nonce}CWD%s\\n' "$PWD"
for __al_n in $__AL_SETENV; do printf '{nonce}ENV%s=%s\\n' "$__al_n" \
"$(printf %s "${{!__al_n}}" | base64 | tr -d '\\n')"; done; exit $__al_rc; }}
trap __al_done EXIT
setenv() {{ if [ $# -lt 1 ]; then echo 'usage: setenv NAME VALUE' >&2; return 2; fi
if [ "$(printf %s "${{2-}}" | wc -c)" -gt {MAX_ENV_VALUE} ]; then
echo "setenv $1: one value may have at most {MAX_ENV_VALUE} bytes" >&2; return 1; fi
export "$1=${{2-}}" && __AL_SETENV="$__AL_SETENV $1"; }}
cd -- {shlex.quote(cwd)} 2>/dev/null
{MARK_STDOUT}{command}
"""
    return "exec bash -c " + shlex.quote(script)


def parse_markers(output: str, nonce: str) -> tuple[str, str | None, dict[str, str]]:
    """Split the wrapped command's output into (output, final cwd, setenv vars)."""
    start = output.find(f"\n{nonce}CWD")
    if start < 0:
        return output, None, {}
    body, tail = output[:start], output[start + 1 :]
    cwd, env = None, {}
    for line in tail.splitlines():
        if line.startswith(nonce + "CWD"):
            cwd = line[len(nonce) + 3 :]
        elif line.startswith(nonce + "ENV"):
            name, _, encoded = line[len(nonce) + 3 :].partition("=")
            env[name] = base64.b64decode(encoded).decode("utf-8", "replace")
    return body, cwd, env


# ------------------------------------------------------------------------------ the session


class Session:
    """One run's conversation. ``run()`` loops until the model stops calling tools, a tool
    defers (wait), the turn limit, three auth failures, or ``cancel`` is set."""

    def __init__(
        self,
        ctx: ActiveRun,
        chain: Any,  # llamaherd.models.ModelChain
        transcript: list[dict[str, Any]],
        *,
        tools: dict[str, Any],  # language-skill Tool objects by name
        max_turns: int = 100,
        options: dict[str, Any] | None = None,
        time_left: Callable[[], float | None] = lambda: None,  # seconds of the run left
        on_turn_limit: Callable[[Session], Outcome] | None = None,
        human_timeout: float = 1800.0,  # seconds an ask / a respond waits for the human
        credentials: Mapping[str, Mapping[str, str]] | None = None,  # staged: "type/inst"
        env: Mapping[str, str] | None = None,  # setenv values this process still holds
    ):
        self.ctx = ctx
        self.chain = chain
        self.tools = tools
        self.max_turns = max_turns
        self.options = options or {}
        self.time_left = time_left
        # The runner suspends an agent with its own maxTurns here; the default (the safety
        # cap) ends the run as an error.
        self.on_turn_limit = on_turn_limit or _turn_limit_error
        self.human_timeout = human_timeout
        self.cancel = threading.Event()  # set once: the run is being stopped
        self.abort = Abort()  # cuts off the model request in flight (stop or interrupt)
        self._inbox: list[str] = []  # messages of `al say` not yet in the transcript
        self._interrupted = threading.Event()
        self._inbox_lock = threading.Lock()
        # What of the transcript is charged to the run's write budget (``_charge_messages``,
        # ``checkpoint``): a stored one was when stored (a new budget counts it: run_writes).
        self._charged, self._meta_size = 0, 0
        if transcript and transcript[0].get("role") == "meta":
            self.meta, self.messages = transcript[0], transcript[1:]
            self._charged, self._meta_size = len(self.messages), len(dumps(self.meta))
        else:
            self.meta, self.messages = {"role": "meta"}, list(transcript)
        self._write_stop: str | None = None  # why the transcript can keep nothing more
        self.credentials = credentials or {}
        self.meta.setdefault("cwd", ctx.sandbox.workdir if ctx.sandbox else "/")
        self.meta["env"], self._env_lost = restore_env(self.meta, env or {}, self.credentials)
        for key in COUNTERS:
            self.meta.setdefault(key, 0)
        for name, value in list(self.env.items()):
            try:
                ctx.keep_env(name, value)
            except LlamaherdError as exc:  # set before the limits existed: not passed on
                log.warning("run %s: %s; dropped", ctx.run_id, exc)
                del self.env[name]
        # The stored (redacted) form of the messages so far, and the redactor that made it.
        self._stored: list[dict[str, Any]] = []
        self._stored_with: Redactor | None = None
        self.budget = RunBudget(ctx)
        self._over_budget: str | None = None  # why the last model call spent the budget

    # -------------------------------------------------------------- state

    @classmethod
    def start(cls, ctx: ActiveRun, chain: Any, system: str, user: str, **kw: Any) -> Session:
        """A fresh session from the two prompts."""
        messages = [Message("system", system).to_dict(), Message("user", user).to_dict()]
        return cls(ctx, chain, messages, **kw)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        return [self.meta, *self.messages]

    def stored_transcript(self) -> list[dict[str, Any]]:
        """The transcript as it is stored: credential and setenv values masked everywhere
        (model text, tool-call arguments, ``write_file`` contents, tool output), and
        ``meta.env`` values replaced by where a restarted scheduler finds them again
        (``restore_env``): the values themselves stay in this process's memory."""
        redactor = self.ctx.stored_redactor
        if self._stored_with is not redactor:  # a new secret (setenv): redact all again
            self._stored_with, self._stored = redactor, []
        # Messages are only ever appended: only the new ones need redacting.
        self._stored += [redactor.redact_obj(m) for m in self.messages[len(self._stored) :]]
        meta = {**self.meta, "env": dict.fromkeys(self.env, MASK)}
        meta["env_from"] = _credential_sources(self.env, self.credentials)
        return [redactor.redact_obj(meta), *self._stored]

    @property
    def cwd(self) -> str:
        return self.meta["cwd"]

    @property
    def env(self) -> dict[str, str]:
        return self.meta["env"]

    def setenv(self, name: str, value: str) -> None:
        """Set an env var for the model's later bash calls (also used by the gateway). Its
        value is treated as a secret: masked in whatever is stored, never in the transcript."""
        if not ENV_NAME.match(name):
            raise LlamaherdError(f"setenv: {name!r} is not a valid variable name")
        self.ctx.keep_env(name, value)
        self.env[name] = value

    @property
    def interactive(self) -> bool:
        return self.ctx.loop_mode == "interactive"

    def stop(self) -> None:
        """End the session from another thread: no further turn, the request in flight cut."""
        self.cancel.set()
        self.abort.fire()

    def interrupt(self, message: str) -> None:
        """``al say``: abort the current turn (the model request in flight, the command
        running if the sandbox can interrupt it, the calls not yet run) and go on with
        ``message`` as the next user input."""
        with self._inbox_lock:
            self._inbox.append(message)
            self._interrupted.set()
        self.abort.fire()
        interrupt = getattr(self.ctx.sandbox, "interrupt", None)
        if callable(interrupt):
            try:
                interrupt()
            except Exception as exc:  # the message still gets through at the turn's end
                self.ctx.log("interrupt_error", {"error": f"{type(exc).__name__}: {exc}"})

    def _take_inbox(self) -> None:
        """Messages from ``interrupt`` become user messages; the next turn starts clean."""
        with self._inbox_lock:
            messages, self._inbox = self._inbox, []
            self._interrupted.clear()
            if not self.cancel.is_set():  # a stop stays fired
                self.abort.reset()
        for text in messages:
            self._human({"message": text, "via": "say"})
            self._add_user(interruption(text))

    def _human(self, data: dict[str, Any]) -> None:
        """What a human said to the run (``al reply``, ``al say``), as a ``human`` event."""
        self.ctx.log(
            "human", {k: truncate(v, 4000) if isinstance(v, str) else v for k, v in data.items()}
        )

    def _add_user(self, text: str) -> None:
        self.messages.append(Message("user", self.ctx.redact_for_model(text)).to_dict())

    def checkpoint(self) -> None:
        store, run_id = self.ctx.store, self.ctx.run_id
        self._charge_messages()
        transcript = self.stored_transcript()
        meta = len(dumps(transcript[0]))  # grows with setenv names, a pending wait...
        if meta > self._meta_size:
            self.ctx.within_budget(TRANSCRIPT_COPIES * (meta - self._meta_size), records=0)
            self._meta_size = meta
        self.ctx.record(lambda: store.checkpoint(run_id, transcript))
        tokens = {key: self.meta[key] for key in ("input_tokens", "output_tokens")}
        self.ctx.record(lambda: store.update_run(run_id, **tokens))

    def _charge_messages(self) -> None:
        """Charge the messages added since the last checkpoint to the run's write budget
        (``llamaherd.write_budget``). Past it each is kept cut (``cut_message``), here and so
        in what the model is sent again; once the cut ones pass ``CUT_RESERVE`` too, the next
        keeps ``KEPT_AT_STOP`` characters and the run stops (``_write_stop``)."""
        for index in range(self._charged, len(self.messages)):
            message = self.messages[index]
            if self.ctx.within_budget(TRANSCRIPT_COPIES * len(dumps(message)), records=0):
                continue
            cut = cut_message(message, OUTPUT_OVER_BUDGET)
            if not self.ctx.write_budget.take_cut(TRANSCRIPT_COPIES * len(dumps(cut))):
                cut, self._write_stop = cut_message(message, KEPT_AT_STOP), TRANSCRIPT_FULL
            self.messages[index] = cut
        self._charged = len(self.messages)

    # -------------------------------------------------------------- loop

    def run(self, resume: dict[str, Any] | None = None) -> Outcome:
        """Continue the conversation; ``resume`` answers a pending deferred tool call (and may
        bring a human's next ``message``, or ``end`` the conversation), or (``{"approved":
        true}``) renews the turn budget of a run suspended at its limit."""
        if resume and resume.get("approved"):
            self.meta["turn_limit"] = self.meta["turns"] + self.max_turns
        to_human = (self.meta.get("pending") or {}).get("kind") == HUMAN
        if resume and (to_human or resume.get("message")):
            if resume.get("end"):
                self._human({"end": True})
            elif resume.get("message"):
                self._human({"message": resume["message"]})
            else:
                self._human({"answer": resume.get("result")})
        self._settle_pending(resume)
        if resume and resume.get("end"):
            self.checkpoint()
            return Outcome("done", reason=str(resume.get("reason") or "conversation ended"))
        notes = [str(resume["message"])] if resume and resume.get("message") else []
        if self._env_lost:
            notes.append(_env_lost_note(self._env_lost))
            self.ctx.log("env_lost", {"names": self._env_lost})
            self._env_lost = []
        if notes:
            self._add_user("\n\n".join(notes))
        while True:
            if self.cancel.is_set():
                return Outcome("cancelled")
            if self._write_stop is not None:
                return Outcome("error", reason=self._write_stop, exit_code=BUDGET_EXIT)
            self._take_inbox()
            if self.meta["turns"] >= self.meta.get("turn_limit", self.max_turns):
                return self.on_turn_limit(self)
            try:
                reply = self._complete()
            except AuthError as exc:
                # The chain raises auth failures at once; the limit is counted here, together
                # with those recognised in tool output.
                self._count_auth_failure("the model provider", str(exc), always=True)
                self._turn_error(exc)
                self.checkpoint()
                if self.meta["auth_failures"] >= AUTH_FAILURE_LIMIT:
                    return Outcome("error", reason=self.meta["auth_reason"])
                continue
            except Aborted:
                if self.cancel.is_set():
                    return Outcome("cancelled")
                continue  # interrupted by a message: the next turn takes it
            except ProviderError as exc:
                self._turn_error(exc)
                raise
            if self.cancel.is_set():
                return Outcome("cancelled")
            # provider_data (thinking blocks, thought signatures) must go back with the turn.
            assistant = Message(
                "assistant", reply.text, reply.tool_calls, provider_data=reply.provider_data
            )
            self.messages.append(assistant.to_dict())
            for tc in reply.tool_calls:  # a value it sets is masked before it is stored
                for name, value in _setenv_literals(tc):
                    with contextlib.suppress(LlamaherdError):  # refused when the call runs
                        self.ctx.keep_env(name, value)
            if self._over_budget is not None and reply.tool_calls:  # work left it may not do
                return self._budget_stop(reply)
            # Before the tools run: after a crash their calls are answered "interrupted"
            # instead of being asked for (and run) a second time.
            self.checkpoint()
            if self._write_stop is not None and reply.tool_calls:
                return self._budget_stop(reply, self._write_stop)
            if not reply.tool_calls:
                if self._interrupted.is_set():
                    continue  # the human's message came while it answered: the turn goes on
                if not self.interactive:
                    return Outcome("done", text=reply.text)
                deferred = self._respond(reply.text)  # plain text is a respond
                self.meta["pending"] = {"tool_call_id": None, "kind": HUMAN, "data": deferred.data}
                self.checkpoint()
                return Outcome("waiting", text=reply.text, deferred=deferred)
            deferred = self._run_tools(reply.tool_calls)
            self.checkpoint()
            if self.meta["auth_failures"] >= AUTH_FAILURE_LIMIT:
                return Outcome("error", reason=self.meta["auth_reason"])
            if self.ctx.state_change is not None:  # off: at once; idle/hibernate: turn's end
                why = f"the agent set its state to {self.ctx.state_change}"
                return Outcome("done", reason=why, text=reply.text)
            if deferred is not None and self._interrupted.is_set():
                pending = self.meta.pop("pending")  # a message came: no parking
                self._answer(pending["tool_call_id"], CUT_SHORT, True)
                continue
            if deferred is not None:
                return Outcome("waiting", deferred=deferred)

    def _budget_stop(self, reply: Reply, reason: str | None = None) -> Outcome:
        """The model call just made reached a budget (spend, or the write budget's
        ``reason``): its tool calls are not run, the transcript is kept, the run ends (reason
        ``budget: ...``, exit ``BUDGET_EXIT``)."""
        reason = reason or self._over_budget or "budget"
        for tc in reply.tool_calls:
            self._answer(tc.id, f"not run: {reason}", True)
        self.ctx.log("budget_stop", {"reason": reason, "turn": self.meta["turns"]})
        self.checkpoint()
        return Outcome("error", reason=reason, text=reply.text, exit_code=BUDGET_EXIT)

    def leftover_messages(self) -> list[str]:
        """Messages ``interrupt`` received too late for the turn that parked the run."""
        with self._inbox_lock:
            messages, self._inbox = self._inbox, []
        return messages

    def _turn_error(self, exc: ProviderError) -> None:
        """A turn that failed for good (not a retried hiccup): recorded so an owner, or the
        agent's own next run (``recent_events``), can tell it from a transient failure."""
        self.ctx.log(
            "turn_error",
            {
                "level": "error",
                "origin": "executor",
                "event": "turn_error",
                "error_class": type(exc).__name__,
                "message": self.ctx.redact(str(exc)),
                "turn": self.meta["turns"] + 1,
            },
        )

    def _settle_pending(self, resume: dict[str, Any] | None) -> None:
        """Answer a deferred call with ``resume``; answer calls cut off by a crash with an error."""
        pending = self.meta.pop("pending", None)
        if pending is not None and pending.get("tool_call_id") is not None:
            resume = resume or {
                "result": "no result (the run was resumed without one)",
                "is_error": True,
            }
            self._answer(
                pending["tool_call_id"], resume.get("result"), resume.get("is_error", False)
            )
        last = self.messages[-1] if self.messages else {}
        if last.get("role") == "assistant":
            answered = {m.get("tool_call_id") for m in self.messages if m["role"] == "tool"}
            cut_off = [tc["id"] for tc in last.get("tool_calls", []) if tc["id"] not in answered]
            if cut_off:
                text = self._interruption()
                for call_id in cut_off:
                    self._answer(call_id, text, True)

    def _interruption(self) -> str:
        """The result of a tool call a crash cut off (the run adopted by the next scheduler):
        what happened and, as a ``<recovery-notice>`` says them, the times of the outage
        (recorded at the adoption)."""
        from llamaherd.clock import clock
        from llamaherd.prompts import recovery_times
        from llamaherd.recovery import ADOPTED

        events = self.ctx.store.events(self.ctx.run_id)
        facts = next((e["data"] for e in reversed(events) if e["type"] == ADOPTED), None)
        lines = [
            "interrupted before a result was recorded: the scheduler running this run stopped "
            "(scheduler crash or host restart) and this run was picked up again after it; "
            "check whether the call took effect before doing it again"
        ]
        return "\n".join(lines + (recovery_times(facts, clock()) if facts else []))

    def _answer(self, call_id: str, result: Any, is_error: bool) -> None:
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        self.messages.append(
            Message(
                "tool", self.ctx.redact_for_model(text), tool_call_id=call_id, is_error=is_error
            ).to_dict()
        )

    def _complete(self) -> Reply:
        messages = [Message.from_dict(m) for m in self.messages]
        with self.abort.guard():
            reply = self.chain.complete(messages, offered_tools(self.tools), self.options)
        self.meta["turns"] += 1
        self._count_usage(reply.usage)
        tokens = reply.usage.input_tokens + reply.usage.output_tokens
        self._over_budget = self.budget.charge(self.meta, reply.usage.cost_usd, tokens)
        if reply.text.strip():
            self.ctx.log(
                "assistant", {"text": truncate(reply.text, 2000), "turn": self.meta["turns"]}
            )
        return reply

    def _count_usage(self, usage: Usage) -> None:
        """The run's running totals: tokens, and cost where the turn's price was known."""
        self.meta["input_tokens"] += usage.input_tokens
        self.meta["output_tokens"] += usage.output_tokens
        self.meta["cached_input_tokens"] += usage.cached_input_tokens
        if usage.cost_usd is None:
            self.meta["unpriced_turns"] += 1
        else:
            self.meta["cost_usd"] = round(self.meta["cost_usd"] + usage.cost_usd, 10)

    def _run_tools(self, calls: list[ToolCall]) -> Deferred | None:
        deferred = None
        for tc in calls:
            ended = self.cancel.is_set() or self.ctx.state_change == "off"
            if deferred is not None or ended:
                self._answer(
                    tc.id,
                    "not run: an earlier call in this turn ended or parked the "
                    "run; call it again if you still need it",
                    True,
                )
                continue
            if self._interrupted.is_set():
                self._answer(tc.id, INTERRUPTED, True)
                continue
            result = self._call_tool(tc)
            self.ctx.settle_after_call()
            if isinstance(result, Deferred):
                deferred = result
                self.meta["pending"] = {
                    "tool_call_id": tc.id,
                    "name": tc.name,
                    "kind": result.kind,
                    "data": result.data,
                }
        return deferred

    def _call_tool(self, tc: ToolCall) -> Any:
        started = time.monotonic()
        exit_code = None
        try:
            if INVALID_ARGUMENTS in tc.arguments:
                text, is_error = (
                    f"error: invalid arguments: {tc.arguments[INVALID_ARGUMENTS]}",
                    True,
                )
            elif tc.name in BUILTIN_HANDLERS:
                text, exit_code = BUILTIN_HANDLERS[tc.name](self, tc.arguments)
                is_error = exit_code not in (0, None)
                if self._interrupted.is_set():
                    text += "\n[cut short: a human interrupted this turn with a message]"
            elif tc.name in TURN_HANDLERS or tc.name in self.tools:
                if tc.name in TURN_HANDLERS:
                    value = TURN_HANDLERS[tc.name](self, tc.arguments)
                else:
                    value = self.tools[tc.name].handler(self.ctx, tc.arguments)
                if isinstance(value, Deferred):
                    self.ctx.log(
                        "tool_call",
                        {
                            "tool": tc.name,
                            "arguments": _short_args(tc.arguments),
                            "deferred": value.kind,
                        },
                    )
                    return value
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                is_error = isinstance(value, dict) and value.get("ok") is False
            else:
                builtin = [t.name for t in BUILTIN_TOOLS + TURN_TOOLS]
                known = ", ".join(builtin + sorted(self.tools))
                text, is_error = f"error: no tool named {tc.name!r} (tools: {known})", True
        except SandboxLost:
            raise  # the run ends (and is requeued): no tool result for a sandbox that is gone
        except (LlamaherdError, OSError, KeyError, TypeError, ValueError) as exc:
            text, is_error = f"error: {type(exc).__name__}: {exc}", True
        text = self.ctx.redact_for_model(truncate(text))
        if is_error:
            self._count_auth_failure(tc.name, text)
        self.messages.append(Message("tool", text, tool_call_id=tc.id, is_error=is_error).to_dict())
        self.ctx.log(
            "tool_call",
            {
                "tool": tc.name,
                "arguments": _short_args(tc.arguments),
                "duration": round(time.monotonic() - started, 4),
                "exit_code": exit_code,
                "is_error": is_error,
                # All the model saw (already cut to MAX_OUTPUT): `al logs --full` shows it.
                "output": text,
            },
        )
        return None

    def _count_auth_failure(self, where: str, text: str, always: bool = False) -> None:
        match = AUTH_PATTERN.search(text)
        if match or always:
            self.meta["auth_failures"] += 1
            what = text if always else repr(match.group(0))
            self.meta["auth_reason"] = (
                f"{AUTH_FAILURE_LIMIT} authentication/permission failures; last from {where}: "
                f"{self.ctx.redact(what)}"
            )

    # -------------------------------------------------------------- built-in tools

    def bash(self, args: dict[str, Any]) -> tuple[str, int]:
        command = str(args["command"])
        line = _setenv_line(command)
        if line is not None:
            self.setenv(*line)
            return f"set {line[0]}", 0
        timeout = float(args.get("timeout") or DEFAULT_BASH_TIMEOUT)
        left = self.time_left()
        if left is not None:
            timeout = max(1.0, min(timeout, left))
        nonce = "__AL_" + secrets.token_hex(6) + "__"
        result = self.ctx.sandbox.exec(
            wrap_command(command, self.cwd, nonce),
            cwd=self.ctx.sandbox.workdir,
            env=dict(self.env),
            timeout=timeout,
        )
        output, cwd, env = parse_markers(result.output, nonce)
        if cwd:
            self.meta["cwd"] = cwd
        output = output.rstrip("\n")
        for name, value in env.items():
            try:
                self.setenv(name, value)
            except LlamaherdError as exc:  # the rest of the call's output still counts
                output += f"\n[{exc}: not kept for later calls]"
        if result.timed_out:
            output += f"\n[timed out after {timeout:g} s; the command was killed]"
        elif result.exit_code != 0:
            output += f"\n[exit code {result.exit_code}]"
        return truncate(output) or "(no output)", result.exit_code

    # -------------------------------------------------------------- turn tools

    def respond(self, args: dict[str, Any]) -> Any:
        message = _required_text(args, "message")
        if not self.interactive:
            self.ctx.log("respond", {"message": truncate(message, 4000)})
            return {"ok": True, "note": "recorded; you are in autonomous mode, nobody replies"}
        return self._respond(message)

    def _respond(self, message: str) -> Deferred:
        """Interactive: the answer is out, the turn ends; the human's next message resumes."""
        self.ctx.log("respond", {"message": truncate(message, 4000)})
        wait = {"type": HUMAN, "kind": "respond"}
        return Deferred(HUMAN, {"filter": wait, "timeout": self.human_timeout})

    def say(self, args: dict[str, Any]) -> Any:
        self.ctx.log("say", {"message": truncate(_required_text(args, "message"), 4000)})
        return {"ok": True}

    def ask(self, args: dict[str, Any]) -> Any:
        question = _required_text(args, "question")
        if not self.interactive:
            return {
                "ok": False,
                "error": "you are in autonomous mode: no human will answer; decide for "
                "yourself, and report what you decided with say or respond",
            }
        self.ctx.log("ask", {"question": truncate(question, 4000)})
        wait = {"type": HUMAN, "kind": "ask", "question": truncate(question, 1000)}
        return Deferred(HUMAN, {"filter": wait, "timeout": self.human_timeout})


BUILTIN_HANDLERS: dict[str, Callable[[Session, dict[str, Any]], tuple[str, int]]] = {
    "bash": Session.bash,
    **FILE_HANDLERS,
    # Earlier names of read and write, still answered (not offered).
    "read_file": FILE_HANDLERS["read"],
    "write_file": FILE_HANDLERS["write"],
}


TURN_HANDLERS: dict[str, Callable[[Session, dict[str, Any]], Any]] = {
    "respond": Session.respond,
    "say": Session.say,
    "ask": Session.ask,
}


def skill_tools(registry: Any) -> dict[str, Any]:
    """The language skills' tools by name, but those the session answers itself."""
    return {name: tool for name, tool in registry.tools().items() if name not in BUILTIN_HANDLERS}


def interruption(message: str) -> str:
    """The user message an ``al say`` becomes."""
    return f"A human interrupted you with this message:\n\n{message}"


def _required_text(args: dict[str, Any], key: str) -> str:
    text = str(args.get(key) or "").strip()
    if not text:
        raise ValueError(f"{key} must be a non-empty text")
    return text


def _setenv_literals(tc: ToolCall) -> list[tuple[str, str]]:
    """The ``(NAME, VALUE)`` pairs a bash call sets with ``setenv NAME VALUE`` written out in
    its command."""
    command = tc.arguments.get("command") if tc.name == "bash" else None
    if not isinstance(command, str) or "setenv" not in command:
        return []
    pairs = []
    for line in command.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        pairs += [
            (name, value)
            for word, name, value in zip(words, words[1:], words[2:], strict=False)
            if word == "setenv" and ENV_NAME.match(name)
        ]
    return pairs


def _setenv_line(command: str) -> tuple[str, str] | None:
    """``setenv NAME VALUE`` as the whole command: handled without a sandbox round trip."""
    if "\n" in command.strip() or not command.lstrip().startswith("setenv "):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if (
        len(words) in (2, 3)
        and ENV_NAME.match(words[1])
        and not any(ch in command for ch in ";&|$`<>()")
    ):
        return words[1], words[2] if len(words) == 3 else ""
    return None


def _env_lost_note(names: list[str]) -> str:
    return (
        f"Note: the scheduler restarted while you were waiting and the values of "
        f"{', '.join(names)} (set with setenv) are gone: setenv values are never stored. "
        "Set them again if you still need them."
    )


def _credential_sources(
    env: Mapping[str, str], credentials: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """``{name: "type/instance#field"}`` for each env value that is a staged credential's."""
    where = {
        value: f"{key}#{name}"
        for key, fields in credentials.items()
        for name, value in fields.items()
    }
    return {name: where[value] for name, value in env.items() if value in where}


def restore_env(
    meta: dict[str, Any],
    remembered: Mapping[str, str],
    credentials: Mapping[str, Mapping[str, str]],
) -> tuple[dict[str, str], list[str]]:
    """The env of a stored transcript with its masked values filled in again: from this
    process's memory, else from the credential the value came from; and the names whose
    value is lost (a restart forgot a value that was no credential's)."""
    sources = meta.pop("env_from", None) or {}
    env: dict[str, str] = {}
    lost = []
    for name, value in (meta.get("env") or {}).items():
        if value != MASK:  # stored by a version that kept values
            env[name] = value
        elif name in remembered:
            env[name] = remembered[name]
        else:
            key, _, field_name = str(sources.get(name, "")).partition("#")
            found = credentials.get(key, {}).get(field_name)
            if found is None:
                lost.append(name)
            else:
                env[name] = found
    return env, lost


def _short_args(args: dict[str, Any]) -> dict[str, Any]:
    """Tool-call arguments as a run event keeps them: each at most 2000 characters (a nested
    value that is longer as JSON is kept as truncated JSON text)."""
    return {key: _short(value) for key, value in args.items()}


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return truncate(value, 2000)
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        return value if len(text) <= 2000 else truncate(text, 2000)
    return value


def cut_message(message: dict[str, Any], keep: int) -> dict[str, Any]:
    """``message`` as the transcript keeps it past the run's write budget: its text and each
    tool call's arguments cut to ``keep`` characters with a marker, its provider data dropped
    (each provider rebuilds a turn without it)."""
    marker = OUTPUT_CUT if message.get("role") == "tool" else TRANSCRIPT_CUT
    cut = {key: value for key, value in message.items() if key != "provider_data"}
    cut["content"] = _cut(str(message.get("content") or ""), keep, marker)
    if message.get("tool_calls"):
        cut["tool_calls"] = [
            {**call, "arguments": _cut_arguments(call.get("arguments") or {}, keep)}
            for call in message["tool_calls"]
        ]
    return cut


def _cut(text: str, keep: int, marker: str) -> str:
    return text if len(text) <= keep else f"{truncate(text, keep)}\n[{marker}]"


def _cut_arguments(arguments: dict[str, Any], keep: int) -> dict[str, Any]:
    text = json.dumps(arguments, default=str)
    return arguments if len(text) <= keep else {ARGUMENTS_CUT: _cut(text, keep, TRANSCRIPT_CUT)}


def _turn_limit_error(session: Session) -> Outcome:
    return Outcome("error", reason=f"reached maxTurns ({session.max_turns}) without finishing")

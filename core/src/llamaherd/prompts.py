"""The two prompts of a run: the system prompt and the first user message.

``al prompt`` and the runner call the same ``build_prompts`` so what you preview is what the model
gets. Block names follow Action Llama's (``<agent-config>``, ``<credential-context>``,
``<environment>``, ``<webhook-trigger>``, ``<skill-subagent>``) so SKILL.md files written for it
keep reading the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from llamaherd.triggers import block, for_kind, generic_block, payload_json

if TYPE_CHECKING:
    from llamaherd.plugins import Registry

BASE_PREAMBLE = """\
You are an agent run by llamaherd.

Built-in tools:
- bash: run a shell command in your sandbox. The working directory carries over between calls; \
`setenv NAME VALUE` sets an environment variable for your later bash calls. Long output is \
truncated.
- read(path, offset?, limit?) / write(path, content) / edit(path, edits=[{oldText, newText}]): read, create or change a file (paths relative to the working directory).
- grep(pattern, path?, glob?, ...) / find(pattern, path?) / ls(path?): search file contents, find files by glob, list a directory.
- respond(message) / say(message) / ask(question): talk to the human (see below).
Credentials are available as environment variables and files (see <credential-context>); never \
print their values."""

# What each loop mode (agent `loop_mode`) adds to the system prompt.
MODE_NOTES = {
    "autonomous": (
        "You are in autonomous mode. You will not receive human input during this session. "
        "Use the say tool to report progress. Use respond to communicate results. Call "
        "set_state when your work is complete."
    ),
    "interactive": (
        "You are in interactive mode: a human takes part in this session. Use respond to "
        "answer them: it ends your turn, and their next message comes back to you. Use ask to "
        "ask them a question and wait for the answer, and say to report progress while you "
        "work. A reply without a tool call counts as respond. Call set_state when your work is "
        "complete."
    ),
}
CHAT_SOURCE = "chat"  # the source of a manual run started by `al chat`: always interactive


@dataclass
class Environment:
    """What ``<environment>`` tells the model about its sandbox and limits."""

    cwd: str = "(the run's working directory)"
    writable: list[str] = field(default_factory=lambda: ["the working directory", "/tmp"])
    timeout: float = 900
    max_turns: int = 100
    bash_timeout: float = 300
    turn_limit_pauses: bool = False  # the agent set maxTurns: the run is suspended there


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------ system prompt


def loop_mode(agent: Any, trigger: dict[str, Any] | None = None) -> str:
    """``interactive`` for a run started by ``al chat``, else the agent's ``loop_mode``."""
    if (trigger or {}).get("source") == CHAT_SOURCE:
        return "interactive"
    return str(agent.config.get("loop_mode", "autonomous"))


def system_prompt(
    agent: Any, registry: Any, run: Any, mode: str = "autonomous", body: str | None = None
) -> str:
    """BASE_PREAMBLE and the loop mode's note, then each language skill's preamble grouped by
    category, then SKILL.md (``body``: its text with context injected, else as written)."""
    parts = [BASE_PREAMBLE, MODE_NOTES[mode]]
    skills = sorted(registry.language_skills.values(), key=lambda s: (s.category, s.name))
    category = None
    for skill in skills:
        text = (skill.preamble(run) or "").strip()
        if not text:
            continue
        if skill.category != category:
            category = skill.category
            parts.append(f"## {category.replace('_', ' ').title()}")
        parts.append(text)
    parts.append("---\n\n" + (agent.body if body is None else body).strip())
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------ user prompt


def credential_context(agent: Any, registry: Any, credential_store: Any = None) -> str:
    """What each declared credential provides: env var NAMES, file dir, the type's text.

    Values are read only to let a type describe itself (``context``); they never appear here.
    A missing credential is described from the type alone, so ``al prompt`` works without them.
    """
    from llamaherd.credentials import is_staged, parse_ref, secret_values
    from llamaherd.redact import Redactor

    lines: list[str] = []
    for ref in agent.credentials:
        type_name, instance = parse_ref(ref)
        ctype = registry.credential_types.get(type_name)
        if ctype is None:
            lines.append(f"- {type_name} ({instance}): credential type not installed")
            continue
        if not is_staged(ctype):
            continue  # model keys stay with the scheduler
        values = _placeholder_values(ctype)
        if credential_store is not None:
            values.update(credential_store.read(type_name, instance) or {})
        root = "$AL_CREDENTIALS_PATH"
        env_names = sorted(ctype.env(values, PurePosixPath(root, type_name, instance)))
        head = f"- {type_name} ({instance}): files in {root}/{type_name}/{instance}/"
        if env_names:
            head += "; env " + ", ".join(env_names)
        lines.append(head)
        # A type may quote non-secret fields (a git username); a secret slipping in is masked.
        secret = Redactor(secret_values({type_name: ctype}, {f"{type_name}/{instance}": values}))
        text = secret.redact((ctype.context(values) or "").strip())
        if text:
            lines.append("  " + text.replace("\n", "\n  "))
    return "\n".join(lines) or "No credentials are configured for this agent."


def _placeholder_values(ctype: Any) -> dict[str, str]:
    # A type's env()/context() may index its fields; give them empty strings, never real values.
    return {f.name: "" for f in getattr(ctype, "fields", [])}


PAUSE_NOTE = " (then the run pauses until your owner approves more)"


def environment_block(env: Environment) -> str:
    return (
        f"Working directory: {env.cwd}\n"
        f"Writable paths: {', '.join(env.writable)}\n"
        f"Limits: the whole run times out after {env.timeout:g} s; at most {env.max_turns} "
        f"model turns{PAUSE_NOTE if env.turn_limit_pauses else ''}; each bash call times out "
        f"after {env.bash_timeout:g} s unless you pass a shorter timeout."
    )


def recovery_notice(recovery: dict[str, Any], now: float) -> str:
    """``<recovery-notice>``: the interrupted run's times, now, and how long the system was down."""
    lines = [
        "An earlier run for this same trigger was interrupted (scheduler crash or host "
        "restart). Check what it already did before acting, so you do not repeat side "
        "effects."
    ]
    if recovery.get("interrupted_run"):
        lines.append(f"Interrupted run: {recovery['interrupted_run']}")
    if recovery.get("cause"):
        lines.append(f"Cause: {recovery['cause']}")
    return block("recovery-notice", "\n".join(lines + recovery_times(recovery, now)))


def recovery_times(recovery: dict[str, Any], now: float) -> list[str]:
    """The lines of an interruption's times (``llamaherd.recovery.recovery_facts``): when the
    run started, its last recorded progress, since when the system was down, now, and how
    long it was down (until ``now`` when the facts do not say)."""
    started = recovery.get("started_at")
    progress = recovery.get("last_progress") or started
    down = recovery.get("down_seconds")
    since = recovery.get("down_since", progress)
    if down is None and since is not None:  # requeued as its scheduler stopped: down until now
        down = max(0.0, now - float(since))
    lines = []
    if started is not None:
        lines.append(f"Interrupted run started: {_iso(float(started))}")
    if progress is not None:
        lines.append(f"Its last recorded progress: {_iso(float(progress))}")
    if recovery.get("down_since") is not None:
        lines.append(f"System down since: {_iso(float(recovery['down_since']))}")
    lines.append(f"Now: {_iso(now)}")
    if down is not None:
        lines.append(f"System down for: about {float(down):.0f} s")
    return lines


def trigger_block(trigger: dict[str, Any], registry: Registry) -> str:
    """Exactly one trigger block: the trigger's own prompt text when it gave one, else the
    block its trigger type writes (``prompt_block``), else the kind and the payload."""
    if trigger.get("prompt"):
        return str(trigger["prompt"]).strip()
    trigger_type = for_kind(registry, str(trigger.get("kind", "manual")))
    write = getattr(trigger_type, "prompt_block", None)
    return write(trigger).strip() if write else generic_block(trigger)


def user_prompt(
    agent: Any,
    registry: Any,
    trigger: dict[str, Any],
    environment: Environment,
    *,
    credential_store: Any = None,
    now: float | None = None,
) -> str:
    """The first user message: config, credentials, environment, recovery notice, trigger."""
    parts = [
        block("agent-config", payload_json(agent.params)),
        block("credential-context", credential_context(agent, registry, credential_store)),
        block("environment", environment_block(environment)),
    ]
    if trigger.get("recovery"):
        from llamaherd.clock import clock

        parts.append(recovery_notice(trigger["recovery"], now if now is not None else clock()))
    parts.extend(flow_blocks(trigger, registry))
    return "\n\n".join(parts)


def flow_blocks(trigger: dict[str, Any], registry: Registry) -> list[str]:
    """The trigger block; for a batch (``[flow] batch``) one per trigger it gathered, after a
    ``<flow-batch>`` header; for a debounced trigger a ``<flow-debounce>`` note of how many
    it stands for first."""
    flow = trigger.get("flow") or {}
    batch = flow.get("batch")
    if batch:
        key = (flow.get("keys") or {}).get("batch", "")
        head = (
            f"This run handles a batch of {len(batch)} triggers"
            + (f" for key {key!r}" if key else "")
            + ", oldest first; each is below. Handle every one of them."
        )
        items = [
            block("batch-item", f"Trigger {i} of {len(batch)}:\n\n" + trigger_block(m, registry))
            for i, m in enumerate(batch, 1)
        ]
        return [block("flow-batch", head), *items]
    count = int(flow.get("count") or 1)
    if count <= 1:
        return [trigger_block(trigger, registry)]
    key = (flow.get("keys") or {}).get("debounce", "")
    ids = ", ".join(str(i) for i in flow.get("ids") or [])
    note = (
        f"{count} triggers"
        + (f" for key {key!r}" if key else "")
        + " arrived within the debounce window; this run gets the last of them (below), "
        f"which stands for all {count}." + (f"\nThey were (oldest first): {ids}" if ids else "")
    )
    return [block("flow-debounce", note), trigger_block(trigger, registry)]


def build_prompts(
    agent: Any,
    registry: Any,
    trigger: dict[str, Any],
    *,
    run: Any = None,
    environment: Environment | None = None,
    credential_store: Any = None,
    now: float | None = None,
    body: str | None = None,
) -> tuple[str, str]:
    """(system, user) for a run of ``agent`` started by ``trigger`` (kind/payload/prompt/...);
    ``body``: the SKILL.md body with its context injected (``llamaherd.injection``)."""
    env = environment or Environment(
        timeout=agent.timeout, max_turns=max_turns(agent), turn_limit_pauses=suspends(agent)
    )
    system = system_prompt(agent, registry, run, loop_mode(agent, trigger), body)
    user = user_prompt(agent, registry, trigger, env, credential_store=credential_store, now=now)
    return system, user


# Without its own ``maxTurns`` an agent is unlimited in principle, but a run still ends as an
# error after this many model turns: a safety cap against a model looping forever.
SAFETY_MAX_TURNS = 100


def max_turns(agent: Any) -> int:
    """The agent's ``maxTurns``, else the safety cap (``SAFETY_MAX_TURNS``)."""
    return int(agent.config.get("maxTurns", SAFETY_MAX_TURNS))


def suspends(agent: Any) -> bool:
    """Whether reaching the turn limit suspends the run for approval (the agent set
    ``maxTurns``) rather than ending it as an error (the safety cap)."""
    return "maxTurns" in agent.config

"""Flow control: what an agent's ``[flow]`` table does to its triggers.

The controls, and where each acts:

- at emit, in the enqueue transaction (``llamaherd.store.flow``): ``rateLimit`` drops the excess
  (recorded as ``trigger.dropped``); ``debounce`` folds a trigger into its key's pending item
  (which fires after a quiet ``period``, at the latest ``timeout`` after the first); ``singleton``
  ``skip``s a trigger for a busy key, ``cancel``s the key's active run (``killed``, reason
  ``superseded``) or ``interrupt``s it (the trigger becomes a message at its next turn);
  ``priority`` is computed and stored with the item;
- at claim (``Queue.claim``): ``singleton``/``concurrency`` hold an item while its key has as many
  active runs (running or waiting) as allowed; ``throttle`` holds it until its key may start
  another run; ``batch`` holds a key's items until ``maxSize`` are queued or the oldest is
  ``timeout`` old, then claims them together as one run; higher ``priority`` goes first.

Every piece of state (pending items, timers, throttle and rate counters) is in the store, so a
restart or a second scheduler on the same PostgreSQL sees the same. An agent call is never
dropped, skipped, merged or batched (its caller waits for its result): it takes its key's
concurrency, throttle and priority only, as do requeued (recovery) items and reruns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llamaherd.durations import parse_duration
from llamaherd.errors import ConfigError, LlamaherdError
from llamaherd.flowkey import (
    Expression,
    ExpressionError,
    compile_expression,
    document,
    key_of,
    priority_of,
)

SINGLETON_MODES = ("skip", "queue", "cancel", "interrupt")
# The controls that take a key, in the order ``al stat`` shows them.
KEYED = ("singleton", "concurrency", "debounce", "throttle", "rateLimit", "batch")
SUPERSEDED = "superseded"  # the reason of a run (or queued item) a newer trigger replaced

_KEY = {
    "type": "string",
    "minLength": 1,
    "description": "The key of this control (default: `[flow] key`): a JMESPath expression "
    'or a "{template}".',
}
_DURATION = {
    "type": ["string", "number"],
    "description": 'A duration: seconds, or "30s", "10m", "2h", "1d".',
}


def _control(description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "object",
        "description": description,
        "properties": {**properties, "key": _KEY},
        "required": required,
        "additionalProperties": False,
    }


def _limit(what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "description": what}


FLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Flow control of this agent's triggers (see docs/flow-control.md): a key "
    "picked out of each trigger, and the controls that act per key.",
    "additionalProperties": False,
    "properties": {
        "key": {
            **_KEY,
            "description": "The default key of every control below: a JMESPath expression over "
            'the trigger (`pull_request.number`) or a template (`"{repository.full_name}'
            '#{issue.number}"`). Unset: one key for all triggers.',
        },
        "singleton": _control(
            "At most one active run per key; `mode` says what a trigger for a busy key does: "
            '"skip" (dropped, recorded), "queue" (waits its turn), "cancel" (the active run '
            'ends `superseded`, the new trigger runs) or "interrupt" (handed to the active '
            "run as a message at its next turn).",
            {
                "mode": {
                    "enum": list(SINGLETON_MODES),
                    "default": "queue",
                    "description": "What a trigger for a busy key does.",
                }
            },
            [],
        ),
        "concurrency": _control(
            "At most `limit` active runs per key (`scale` still caps the agent's runs).",
            {"limit": _limit("Active (running or waiting) runs per key.")},
            ["limit"],
        ),
        "debounce": _control(
            "Wait for `period` without a new trigger for the key, then run once with the last "
            "trigger (and the count of those it absorbed); `timeout` caps the wait from the "
            "first.",
            {
                "period": {**_DURATION, "description": "The quiet period."},
                "timeout": {**_DURATION, "description": "The longest wait (default: none)."},
            },
            ["period"],
        ),
        "throttle": _control(
            "At most `limit` run starts per `period` per key, spread evenly (`burst` may start "
            "at once); the excess waits in the queue, nothing is dropped.",
            {
                "limit": _limit("Starts per period."),
                "period": _DURATION,
                "burst": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 1,
                    "description": "Starts allowed at once.",
                },
            },
            ["limit", "period"],
        ),
        "rateLimit": _control(
            "At most `limit` triggers per `period` per key; the excess is dropped and recorded "
            "(`trigger.dropped`).",
            {"limit": _limit("Triggers per period."), "period": _DURATION},
            ["limit", "period"],
        ),
        "batch": _control(
            "Collect up to `maxSize` triggers per key, or what came within `timeout` of the "
            "first, into one run whose prompt lists every payload.",
            {
                "maxSize": _limit("Triggers in one run."),
                "timeout": {**_DURATION, "description": "The longest wait for a full batch."},
            },
            ["maxSize", "timeout"],
        ),
        "priority": {
            "type": "string",
            "minLength": 1,
            "description": "A JMESPath expression giving a number; higher first among the "
            "agent's queued triggers (default 0).",
        },
    },
}


@dataclass(frozen=True)
class Throttle:
    limit: int
    period: float
    burst: int = 1

    @property
    def interval(self) -> float:
        """Seconds between starts at the steady rate."""
        return self.period / self.limit


@dataclass(frozen=True)
class FlowPolicy:
    """An agent's ``[flow]``, parsed (``Agent.flow``; None when the agent has none)."""

    keys: dict[str, Expression]  # control -> its key expression (absent: the one empty key)
    singleton: str | None = None  # mode
    concurrency: int | None = None  # active runs per key (1 with singleton)
    debounce: tuple[float, float | None] | None = None  # (period, timeout)
    throttle: Throttle | None = None
    rate_limit: Throttle | None = None  # burst = limit: `limit` at once, then evenly
    batch: tuple[int, float] | None = None  # (maxSize, timeout)
    priority: Expression | None = None

    @property
    def claim_time(self) -> bool:
        """Whether the claim must choose among the agent's items (not simply the oldest)."""
        return bool(
            self.concurrency or self.debounce or self.throttle or self.batch or self.priority
        )


@dataclass
class Ticket:
    """One trigger's passage through flow control at emit: its keys and priority in, what
    became of it out (``outcome``, and the runs it superseded or interrupted)."""

    policy: FlowPolicy
    keys: dict[str, str]
    priority: float | None
    admit: bool  # False: agent calls, recoveries, reruns (never dropped, merged, batched)
    label: str = ""  # the trigger as a log line names it (kind, delivery id)
    outcome: str | None = None  # "dropped" | "skipped" | "debounced" | "superseded" | ...
    reason: str | None = None
    superseded: list[str] = field(default_factory=list)  # runs ended for this trigger
    interrupted: tuple[str, str | None] | None = None  # (run id, its host)
    message: str | None = None  # singleton interrupt: what the active run is told

    def key(self, control: str) -> str:
        """The trigger's key for ``control`` ("" when the control has no key expression)."""
        return self.keys.get(control, "")


def policy_of(agent: Any) -> FlowPolicy | None:
    """``agent.flow``, or None while its ``[flow]`` is broken (the scheduler holds such an agent
    in ``error``; ``al validate`` says why): its triggers queue as without one."""
    try:
        return agent.flow
    except ConfigError:
        return None


def parse_policy(file: str, table: Any) -> FlowPolicy | None:
    """``[flow]`` of an agent, or None when absent; ConfigError naming the key at fault."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(file, "flow", "expected a table")
    default = _expression(file, "flow.key", table.get("key"))
    keys: dict[str, Expression] = {}
    for control in KEYED:
        if not isinstance(table.get(control), dict):
            continue
        own = _expression(file, f"flow.{control}.key", table[control].get("key"))
        chosen = own or default
        if chosen is not None:
            keys[control] = chosen
    values: dict[str, Any] = {"keys": keys}
    singleton = table.get("singleton")
    if isinstance(singleton, dict):
        values["singleton"] = str(singleton.get("mode", "queue"))
        values["concurrency"] = 1  # a singleton is a concurrency of one, with a mode
        if "singleton" in keys:
            keys["concurrency"] = keys.pop("singleton")
    concurrency = table.get("concurrency")
    if isinstance(concurrency, dict):
        if singleton is not None:
            raise ConfigError(
                file,
                "flow.concurrency",
                "set either singleton (one active run per key) or concurrency (limit per key)",
            )
        values["concurrency"] = int(concurrency["limit"])
    debounce = table.get("debounce")
    if isinstance(debounce, dict):
        timeout = debounce.get("timeout")
        period = _seconds(file, "flow.debounce.period", debounce.get("period"))
        limit = None if timeout is None else _seconds(file, "flow.debounce.timeout", timeout)
        if limit is not None and limit < period:
            raise ConfigError(file, "flow.debounce.timeout", "expected at least the period")
        values["debounce"] = (period, limit)
    throttle = table.get("throttle")
    if isinstance(throttle, dict):
        period = _seconds(file, "flow.throttle.period", throttle.get("period"))
        values["throttle"] = Throttle(int(throttle["limit"]), period, int(throttle.get("burst", 1)))
    rate = table.get("rateLimit")
    if isinstance(rate, dict):
        period = _seconds(file, "flow.rateLimit.period", rate.get("period"))
        values["rate_limit"] = Throttle(int(rate["limit"]), period, int(rate["limit"]))
    batch = table.get("batch")
    if isinstance(batch, dict):
        if debounce is not None:
            raise ConfigError(
                file, "flow.batch", "set either debounce (the last trigger) or batch (all of them)"
            )
        timeout = _seconds(file, "flow.batch.timeout", batch.get("timeout"))
        values["batch"] = (int(batch["maxSize"]), timeout)
    values["priority"] = _expression(file, "flow.priority", table.get("priority"))
    return FlowPolicy(**values)


def _expression(file: str, key: str, text: Any) -> Expression | None:
    if text is None:
        return None
    try:
        return compile_expression(text)
    except ExpressionError as exc:
        raise ConfigError(file, key, str(exc)) from None


def _seconds(file: str, key: str, value: Any) -> float:
    try:
        return parse_duration(value, key)
    except LlamaherdError:
        raise ConfigError(
            file, key, f"expected a duration like 30s, 10m, 2h, got {value!r}"
        ) from None


def ticket(policy: FlowPolicy, event: Any) -> Ticket:
    """The keys and priority of ``event`` under ``policy`` (evaluated once, at emit)."""
    doc = document(event.kind, event.payload, event.prompt, event.source)
    keys = {control: key_of(expr, doc) for control, expr in policy.keys.items()}
    priority = None if policy.priority is None else priority_of(policy.priority, doc)
    admit = event.call_id is None and event.recovery is None and not event.rerun_count
    delivery = (event.payload or {}).get("delivery") if isinstance(event.payload, dict) else None
    label = f"{event.kind} trigger" + (f" {delivery}" if delivery else "")
    return Ticket(policy, keys, priority, admit, label)


def preview(
    policy: FlowPolicy | None, kind: str, payload: Any, prompt: str = "", source: str | None = None
) -> dict[str, Any]:
    """What ``al prompt`` shows: each control's key for this trigger, and its priority."""
    if policy is None:
        return {}
    doc = document(kind, payload, prompt, source)
    shown: dict[str, Any] = {
        control: key_of(expr, doc) for control, expr in sorted(policy.keys.items())
    }
    if policy.priority is not None:
        shown["priority"] = priority_of(policy.priority, doc)
    return shown


def interrupt_message(registry: Any, event: Any, found: Ticket) -> str:
    """What the key's active run is told when a singleton ``interrupt`` hands it ``event``."""
    from llamaherd.prompts import trigger_block

    trigger = {
        "kind": event.kind, "payload": event.payload, "prompt": event.prompt,
        "source": event.source,
    }  # fmt: skip
    key = found.key("concurrency")
    return (
        f"A newer trigger for the key you are working on ({key!r}) arrived while you worked. "
        "Continue with it, keeping what you have done so far:\n\n"
        + trigger_block(trigger, registry)
    )


def flow_view(agent: Any, store: Any, now: float) -> dict[str, Any] | None:
    """What ``al stat AGENT``, the dashboard and MCP show of an agent's flow control: its
    controls in words, and per key what is pending, active and throttled."""
    policy = agent.flow
    if policy is None:
        return None
    return {"controls": describe_controls(policy), **store.flow_state(agent.name, policy, now)}


def describe_controls(policy: FlowPolicy) -> list[str]:
    """Each control of ``policy`` in a few words ("debounce 2s (at most 1m)")."""
    found = []
    if policy.singleton:
        found.append(f"singleton ({policy.singleton})")
    elif policy.concurrency:
        found.append(f"concurrency {policy.concurrency} per key")
    if policy.debounce:
        period, timeout = policy.debounce
        found.append(f"debounce {period:g}s" + (f" (at most {timeout:g}s)" if timeout else ""))
    if policy.throttle:
        t = policy.throttle
        found.append(f"throttle {t.limit} per {t.period:g}s (burst {t.burst})")
    if policy.rate_limit:
        found.append(f"rate limit {policy.rate_limit.limit} per {policy.rate_limit.period:g}s")
    if policy.batch:
        found.append(f"batch {policy.batch[0]} or {policy.batch[1]:g}s")
    if policy.priority:
        found.append(f"priority {policy.priority.text}")
    return found

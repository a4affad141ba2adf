"""The cassette: one run's model side, turn by turn, as a readable JSON file beside its case.

A turn is what the session asked the model (the request: the system prompt, the messages so
far, the tools offered, the model) and what the model answered (the reply: text, tool calls,
usage, provider data). The file keeps the system prompt and the tools once and, per turn, only
the messages added since the previous request (the previous reply is the assistant message
between them), so a long run stays readable and its size linear.

Everything in a cassette is *normalised*: redacted as the store keeps a transcript (credential
and ``setenv`` values are ``***``), and the values that differ from one run to the next
replaced by placeholders (``{{al.workdir}}``, ``{{al.run_id}}``, ``{{al.gateway}}``), which a
replay fills in with its own run's. So a cassette recorded from a production run replays in a
test run, and holds no secret.

Two requests match when their normalised forms are equal, after the case's ``ignore`` patterns
are masked in both; ``match = "prompt"`` compares only the model, the system prompt, the tools
and the first user message (for agents whose tool results are not reproducible).
``difference`` says what changed between two requests, in lines a person reads.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.errors import ConfigError
from llamaherd.types import Message, Reply, ToolCall, ToolSpec, Usage

FORMAT = "llamaherd-cassette/1"
# Placeholders for what differs between two runs of the same case, longest value first.
PLACEHOLDERS = ("workdir", "run_id", "gateway")
IGNORED = "<ignored>"
MATCHES = ("request", "prompt")
DIFF_LINES = 40  # lines of a unified diff shown for one changed text


def now_iso() -> str:
    """When a cassette is recorded, as it says it."""
    from datetime import UTC, datetime

    from llamaherd.clock import clock

    return datetime.fromtimestamp(clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def placeholder(name: str) -> str:
    return "{{al." + name + "}}"


# ------------------------------------------------------------------------------ normalising


def _walk(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (JSON-able) with ``change`` applied to every string in it, keys kept."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_walk(item, change) for item in value]
    if isinstance(value, dict):
        return {key: _walk(item, change) for key, item in value.items()}
    return value


@dataclass
class Substitutions:
    """This run's values of the placeholders (``name -> value``; empty values left out)."""

    values: dict[str, str] = field(default_factory=dict)

    def normalise(self, value: Any) -> Any:
        pairs = [(v, placeholder(n)) for n, v in self._ordered()]
        return _walk(value, lambda text: _replace_all(text, pairs))

    def denormalise(self, value: Any) -> Any:
        pairs = [(placeholder(n), v) for n, v in self._ordered()]
        return _walk(value, lambda text: _replace_all(text, pairs))

    def _ordered(self) -> list[tuple[str, str]]:
        # The working dir holds the run id on host-user: it must go first.
        return sorted(((n, v) for n, v in self.values.items() if v), key=lambda p: -len(p[1]))


def _replace_all(text: str, pairs: Iterable[tuple[str, str]]) -> str:
    for old, new in pairs:
        if old in text:
            text = text.replace(old, new)
    return text


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(request: Mapping[str, Any]) -> str:
    """The canonical digest of a normalised request: its system prompt, messages and tools."""
    body = {key: request.get(key) for key in ("system", "messages", "tools")}
    return "sha256:" + hashlib.sha256(canonical(body).encode()).hexdigest()


def tool_dicts(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools
    ]


def model_dict(model: Any) -> dict[str, Any]:
    """Which model answered: its ``[models.<name>]`` name, provider and model id."""
    return {"name": model.name, "provider": model.provider, "model": model.model}


def reply_dict(reply: Reply) -> dict[str, Any]:
    usage = reply.usage
    data: dict[str, Any] = {
        "text": reply.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls
        ],
        "stop_reason": reply.stop_reason,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_input_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
    }
    if reply.provider_data:
        data["provider_data"] = reply.provider_data
    return data


def reply_of(data: Mapping[str, Any]) -> Reply:
    usage = data.get("usage") or {}
    return Reply(
        text=str(data.get("text") or ""),
        tool_calls=[
            ToolCall(str(c["id"]), str(c["name"]), dict(c["arguments"]))
            for c in data.get("tool_calls") or []
        ],
        usage=Usage(
            input_tokens=int(usage.get("input_tokens", 0)),
            output_tokens=int(usage.get("output_tokens", 0)),
            cached_input_tokens=int(usage.get("cached_input_tokens", 0)),
            cache_write_tokens=int(usage.get("cache_write_tokens", 0)),
        ),
        stop_reason=data.get("stop_reason"),
        provider_data=dict(data.get("provider_data") or {}),
    )


def assistant_message(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message the session appends for a reply (``Message.to_dict``)."""
    return Message(
        "assistant",
        str(reply.get("text") or ""),
        [ToolCall(c["id"], c["name"], c["arguments"]) for c in reply.get("tool_calls") or []],
        provider_data=dict(reply.get("provider_data") or {}),
    ).to_dict()


# ------------------------------------------------------------------------------ the file


@dataclass
class Cassette:
    """A cassette in memory. ``turns`` are ``{"messages", "digest", "model", "reply"}``: the
    messages added since the previous request, the request's digest, who answered, what."""

    agent: str
    system: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    recorded: dict[str, Any] = field(default_factory=dict)  # from where, when

    def request(self, turn: int) -> dict[str, Any]:
        """The normalised request of ``turn`` (1-based), rebuilt from the deltas."""
        messages: list[dict[str, Any]] = []
        for index, entry in enumerate(self.turns[:turn]):
            if index:
                messages.append(assistant_message(self.turns[index - 1]["reply"]))
            messages += entry["messages"]
        return {
            "model": self.turns[turn - 1].get("model") or {},
            "system": self.system,
            "tools": self.tools,
            "messages": messages,
        }

    def add(
        self, request: Mapping[str, Any], model: Mapping[str, Any], reply: Mapping[str, Any]
    ) -> None:
        """Append a turn: ``request`` is the whole normalised request; only what is new since
        the previous request is kept."""
        if not self.turns:
            self.system, self.tools = request["system"], request["tools"]
        before = len(self.request(len(self.turns))["messages"]) + 1 if self.turns else 0
        self.turns.append(
            {
                "messages": request["messages"][before:],
                "digest": digest(request),
                "model": dict(model),
                "reply": dict(reply),
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "agent": self.agent,
            "recorded": self.recorded,
            "system": self.system,
            "tools": self.tools,
            "turns": self.turns,
        }

    def save(self, path: Path) -> None:
        """Write the file whole (a temp file renamed into place: never half a cassette)."""
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_text(text, encoding="utf-8")
        temp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Cassette:
        """A cassette file; a ConfigError naming the file and what is wrong with it."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(str(path), "", f"cannot read: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(str(path), "", f"not a cassette (invalid JSON: {exc})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(str(path), "format", f'expected "{FORMAT}" (a cassette of al test)')
        turns = data.get("turns")
        if not isinstance(turns, list) or not all(_is_turn(t) for t in turns):
            raise ConfigError(
                str(path), "turns", "expected a list of {messages, digest, model, reply} tables"
            )
        try:
            for turn in turns:
                reply_of(turn["reply"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(str(path), "turns", f"a reply is malformed ({exc})") from None
        return cls(
            agent=str(data.get("agent") or ""),
            system=str(data.get("system") or ""),
            tools=list(data.get("tools") or []),
            turns=turns,
            recorded=dict(data.get("recorded") or {}),
        )


def _is_turn(turn: Any) -> bool:
    return (
        isinstance(turn, dict)
        and isinstance(turn.get("messages"), list)
        and all(isinstance(m, dict) and "role" in m for m in turn["messages"])
        and isinstance(turn.get("reply"), dict)
    )


# ------------------------------------------------------------------------------ comparing


def _masked(value: Any, ignore: list[re.Pattern[str]]) -> Any:
    if not ignore:
        return value

    def mask(text: str) -> str:
        for pattern in ignore:
            text = pattern.sub(IGNORED, text)
        return text

    return _walk(value, mask)


def _first_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    index = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    return messages[: index + 1]


def compared(request: Mapping[str, Any], match: str, ignore: list[re.Pattern[str]]) -> dict:
    """What of ``request`` a comparison looks at: all of it, or (``match = "prompt"``) the
    model, the system prompt, the tools and the first user message; ``ignore`` masked."""
    messages = list(request.get("messages") or [])
    seen = {
        "model": _model_key(request.get("model") or {}),
        "system": request.get("system"),
        "tools": request.get("tools"),
        "messages": _first_user(messages) if match == "prompt" else messages,
    }
    return _masked(seen, ignore)


def _model_key(model: Mapping[str, Any]) -> dict[str, Any]:
    return {"provider": model.get("provider"), "model": model.get("model")}


def difference(
    recorded: Mapping[str, Any],
    now: Mapping[str, Any],
    match: str = "request",
    ignore: list[re.Pattern[str]] | None = None,
) -> list[str]:
    """What changed from the ``recorded`` request to the one made ``now``, as report lines (an
    empty list: they match). Only the first differing part of the messages is shown."""
    old, new = compared(recorded, match, ignore or []), compared(now, match, ignore or [])
    if old == new:
        return []
    lines: list[str] = []
    if old["model"] != new["model"]:
        lines.append(f"the model: recorded from {_model_name(recorded)}, now {_model_name(now)}")
    if old["system"] != new["system"]:
        lines.append("the system prompt changed:")
        lines += _text_diff(str(old["system"] or ""), str(new["system"] or ""))
    if old["tools"] != new["tools"]:
        lines.append("the tools changed: " + _tools_change(old["tools"] or [], new["tools"] or []))
    if old["messages"] != new["messages"]:
        lines += _messages_change(old["messages"], new["messages"])
    return lines


def _model_name(request: Mapping[str, Any]) -> str:
    model = request.get("model") or {}
    return f"{model.get('name')} ({model.get('provider')} {model.get('model')})"


def _text_diff(old: str, new: str) -> list[str]:
    diff = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), "recorded", "now", n=2, lineterm=""
        )
    )
    if len(diff) > DIFF_LINES:  # its head and its tail: the lines removed come before those added
        half = DIFF_LINES // 2
        diff = [*diff[:half], f"... ({len(diff) - 2 * half} diff lines not shown)", *diff[-half:]]
    return ["    " + line for line in diff]


def _tools_change(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    before = {t.get("name"): t for t in old}
    after = {t.get("name"): t for t in new}
    parts = []
    added = [name for name in after if name not in before]
    removed = [name for name in before if name not in after]
    changed = [name for name in after if name in before and after[name] != before[name]]
    if added:
        parts.append("added " + ", ".join(map(str, added)))
    if removed:
        parts.append("removed " + ", ".join(map(str, removed)))
    for name in changed:
        what = [
            k for k in ("description", "parameters") if after[name].get(k) != before[name].get(k)
        ]
        parts.append(f"changed {name} (its {' and '.join(what)})")
    return "; ".join(parts) or "their order"


def _messages_change(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    index = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    if index >= len(old):
        return [
            f"the run sent {len(new) - len(old)} more message(s) than recorded, from message {index + 1}:"
        ] + ["    + " + line for m in new[index : index + 2] for line in _render(m)]
    if index >= len(new):
        return [
            f"the run sent {len(old) - len(new)} message(s) fewer than recorded, from message {index + 1}"
        ]
    label = _label(new[index])
    lines = [f"message {index + 1} ({label}) changed:"]
    lines += _text_diff("\n".join(_render(old[index])), "\n".join(_render(new[index])))
    return lines


def _label(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if role == "tool":
        return f"the result of tool call {message.get('tool_call_id')}"
    if role == "assistant":
        return "the model's turn"
    if role == "user":
        return "a user message"
    return str(role)


def _render(message: Mapping[str, Any]) -> list[str]:
    """A message as lines of text: its content, then its tool calls and flags."""
    lines = str(message.get("content") or "").splitlines()
    for call in message.get("tool_calls") or []:
        lines.append(
            f"[tool call {call.get('id')}] {call.get('name')} {canonical(call.get('arguments'))}"
        )
    if message.get("is_error"):
        lines.append("[error result]")
    return lines

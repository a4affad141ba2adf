"""script.toml: parsing, the tiny template language, and the replies it yields.

The reply for a call is chosen by counting the assistant messages already in the transcript, so
the provider keeps no state: a run resumed after a restart continues where it stopped.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import (
    ConfigError,
    Message,
    ModelConfig,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
    read_toml,
)

DEFAULT_SCRIPT = "script.toml"
# Template variables: {{ payload.a.b }}, {{ params.k }}, {{ trigger.kind }}, {{ last_result }},
# {{ last_user }} (the latest user message: a human's `al say` / `al reply`), {{ turn }}
# (1-based), {{ run_id }}, {{ agent }}. A missing key renders as "".
ROOTS = ("payload", "params", "trigger", "last_result", "last_user", "turn", "run_id", "agent")
TEMPLATE = re.compile(r"\{\{(.*?)\}\}")
PATH = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")
TURN_KEYS = ("text", "tool_calls", "repeat", "loop", "usage")
USAGE_KEYS = ("input", "output", "cached_input")
CALL_KEYS = ("name", "arguments")


@dataclass(frozen=True)
class Turn:
    """One scripted reply. ``repeat`` is how many model calls it answers (0: every one left)."""

    text: str = ""
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    repeat: int = 1
    # Token counts the reply reports (input, output, cached input); None: estimated from the
    # text (4 characters a token).
    usage: tuple[int, int, int] | None = None


# --------------------------------------------------------------------------- parsing


def load_script(path: Path) -> list[Turn]:
    """Parse and check ``path``; every problem is a ConfigError naming the file and key."""
    data = read_toml(path)
    file = str(path)
    _known_keys(file, "", data, ("turns",))
    raw_turns = data.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        raise ConfigError(file, "turns", "expected one or more [[turns]] tables")
    turns = [_turn(file, f"turns[{i}]", raw) for i, raw in enumerate(raw_turns)]
    for i, turn in enumerate(turns[:-1]):
        if turn.repeat == 0:
            raise ConfigError(file, f"turns[{i}].loop", "only the last turn can loop")
    return turns


def _known_keys(file: str, where: str, table: dict[str, Any], known: tuple[str, ...]) -> None:
    for key in table:
        if key not in known:
            match = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {match[0]!r}?" if match else "expected " + ", ".join(known)
            raise ConfigError(file, f"{where}.{key}" if where else key, f"unknown key; {hint}")


def _turn(file: str, where: str, raw: Any) -> Turn:
    if not isinstance(raw, dict):
        raise ConfigError(file, where, "expected a table")
    _known_keys(file, where, raw, TURN_KEYS)
    text = raw.get("text", "")
    if not isinstance(text, str):
        raise ConfigError(file, f"{where}.text", "expected a string")
    raw_calls = raw.get("tool_calls", [])
    if not isinstance(raw_calls, list):
        raise ConfigError(file, f"{where}.tool_calls", "expected a list of {name, arguments}")
    if not text and not raw_calls:
        raise ConfigError(file, where, 'expected text = "..." or tool_calls = [...]')
    calls = tuple(_call(file, f"{where}.tool_calls[{j}]", c) for j, c in enumerate(raw_calls))
    repeat, loop = raw.get("repeat", 1), raw.get("loop", False)
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise ConfigError(file, f"{where}.repeat", "expected a positive integer")
    if not isinstance(loop, bool):
        raise ConfigError(file, f"{where}.loop", "expected true or false")
    _check_templates(file, f"{where}.text", text)
    usage = _usage(file, f"{where}.usage", raw.get("usage"))
    return Turn(text=text, tool_calls=calls, repeat=0 if loop else repeat, usage=usage)


def _usage(file: str, where: str, raw: Any) -> tuple[int, int, int] | None:
    """``usage = { input = 1200, output = 300, cached_input = 0 }``: what the turn reports."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(file, where, "expected a table { input = N, output = N }")
    _known_keys(file, where, raw, USAGE_KEYS)
    counts = []
    for key in USAGE_KEYS:
        value = raw.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(file, f"{where}.{key}", "expected a whole number of tokens")
        counts.append(value)
    return counts[0], counts[1], counts[2]


def _call(file: str, where: str, raw: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise ConfigError(file, where, "expected a table {name = ..., arguments = {...}}")
    _known_keys(file, where, raw, CALL_KEYS)
    name, arguments = raw.get("name"), raw.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise ConfigError(file, f"{where}.name", "expected a tool name")
    if not isinstance(arguments, dict):
        raise ConfigError(file, f"{where}.arguments", "expected a table of arguments")
    _check_templates(file, f"{where}.arguments", arguments)
    return name, arguments


def _check_templates(file: str, where: str, value: Any) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _check_templates(file, f"{where}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_templates(file, f"{where}[{i}]", item)
    elif isinstance(value, str):
        for match in TEMPLATE.finditer(value):
            expr = match.group(1).strip()
            if not PATH.fullmatch(expr) or expr.split(".")[0] not in ROOTS:
                raise ConfigError(
                    file,
                    where,
                    f"unknown template variable {expr!r}; expected one of "
                    + ", ".join(
                        f"{root}.*" if root in ("payload", "params", "trigger") else root
                        for root in ROOTS
                    ),
                )


# --------------------------------------------------------------------------- templating


def render(value: Any, context: dict[str, Any]) -> Any:
    """Fill ``{{ var.path }}`` in every string inside ``value``."""
    if isinstance(value, str):
        return TEMPLATE.sub(lambda m: _show(_lookup(context, m.group(1).strip())), value)
    if isinstance(value, dict):
        return {key: render(item, context) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, context) for item in value]
    return value


def _lookup(context: dict[str, Any], expr: str) -> Any:
    root, *rest = expr.split(".")
    value = context.get(root)
    for part in rest:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


# --------------------------------------------------------------------------- replies


def turn_at(turns: list[Turn], index: int) -> Turn | None:
    """The turn answering the ``index``-th model call (0-based), None past the script's end."""
    for turn in turns:
        if turn.repeat == 0 or index < turn.repeat:
            return turn
        index -= turn.repeat
    return None


def complete(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig, options: dict[str, Any]
) -> Reply:
    """The reply for this transcript: the script's next turn, or the default behaviour."""
    index = sum(1 for m in messages if m.role == "assistant")
    context = _context(messages, options, index)
    path = _script_path(model, options)
    if path is None:
        turn = turn_at(default_turns(tools, context), index)
    else:
        turn = turn_at(load_script(path), index)
        if turn is not None:
            rendered = tuple((name, render(args, context)) for name, args in turn.tool_calls)
            turn = Turn(render(turn.text, context), rendered, usage=turn.usage)
    if turn is None:
        turn = Turn(text="Script finished.")
    calls = [
        ToolCall(id=f"call_{index + 1}_{j + 1}", name=name, arguments=arguments)
        for j, (name, arguments) in enumerate(turn.tool_calls)
    ]
    if turn.usage is None:
        usage = Usage(input_tokens=_estimate(messages), output_tokens=_tokens(turn.text, calls))
    else:
        fresh, output, cached = turn.usage
        usage = Usage(input_tokens=fresh + cached, output_tokens=output, cached_input_tokens=cached)
    return Reply(
        text=turn.text,
        tool_calls=calls,
        usage=usage,
        stop_reason="tool_use" if calls else "end_turn",
    )


def _script_path(model: ModelConfig, options: dict[str, Any]) -> Path | None:
    """The script to replay; None means default behaviour (no script.toml in the folder).
    Anything at its name is the script: a directory, a FIFO or a dangling link there is
    refused by ``load_script`` (``read_project_file``), never taken for "no script"."""
    name = model.extra.get("script")
    agent_dir = options.get("agent_dir")
    path = Path(agent_dir or ".") / (name or DEFAULT_SCRIPT)
    if os.path.lexists(path):
        return path
    if name:  # asked for by name: its absence is an error, not a silent default
        raise ConfigError(str(path), "", f"script file of model {model.name!r} not found")
    return None


def _context(messages: list[Message], options: dict[str, Any], index: int) -> dict[str, Any]:
    trigger = options.get("trigger") or {}
    last_result = next((m.content for m in reversed(messages) if m.role == "tool"), "")
    last_user = next((m.content for m in reversed(messages) if m.role == "user"), "")
    agent_dir = options.get("agent_dir")
    return {
        "payload": template_payload(trigger),
        "params": options.get("params") or {},
        "trigger": trigger,
        "last_result": last_result,
        "last_user": last_user,
        "turn": index + 1,
        "run_id": options.get("run_id"),
        "agent": Path(agent_dir).name if agent_dir else "",
    }


def template_payload(trigger: dict[str, Any]) -> dict[str, Any]:
    """What ``{{ payload.* }}`` reads: the trigger's payload. A webhook run's payload is the
    delivery's fields (``event``, ``action``, ``repo``, ``number``, ``source``...: what its
    ``<webhook-trigger>`` block shows) with its JSON body under ``payload``; here the fields are
    laid over the body, so ``payload.status`` is the body's ``status`` (as a reader of the
    docs expects) and ``payload.event`` the event; ``payload.payload`` is still the body."""
    payload = trigger.get("payload") or {}
    body = payload.get("payload")
    if trigger.get("kind") != "webhook" or not isinstance(body, dict):
        return payload
    return {**body, **{key: value for key, value in payload.items() if value is not None}}


def default_turns(tools: list[ToolSpec], context: dict[str, Any]) -> list[Turn]:
    """No script: report the trigger, return a summary, answer. Steps whose tool is not
    offered are left out."""
    trigger = context["trigger"]
    kind = trigger.get("kind") or "manual"
    summary = f"{context['agent'] or 'agent'} handled a {kind} trigger"
    offered = {tool.name for tool in tools}
    turns = [
        Turn(tool_calls=(("set_status", {"text": describe(trigger)}),)),
        Turn(tool_calls=(("return_value", {"value": summary}),)),
    ]
    turns = [t for t in turns if t.tool_calls[0][0] in offered]
    return [*turns, Turn(text=f"Done: {summary}.")]


def describe(trigger: dict[str, Any]) -> str:
    """One status line naming the trigger: kind, source and the payload's headline fields."""
    bits = [f"{trigger.get('kind') or 'manual'} trigger"]
    if trigger.get("source"):
        bits.append(f"from {trigger['source']}")
    payload = trigger.get("payload") or {}
    for key in ("event", "action", "repo", "number", "caller"):
        value = payload.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            bits.append(f"{key}={value}")
    return "received " + " ".join(bits)


def _tokens(text: str, calls: list[ToolCall]) -> int:
    # A rough count (4 characters a token), enough for the usage figures in logs.
    return (len(text) + sum(len(c.name) + len(json.dumps(c.arguments)) for c in calls)) // 4


def _estimate(messages: list[Message]) -> int:
    return sum(_tokens(m.content, m.tool_calls) for m in messages)

"""Rendering run events for people (``al run``, ``al logs``): a run reads like a conversation
(the assistant's text, each tool call with its command, the output), with no ``null`` or
float noise, long output cut with a line saying how much and how to see it all.

Everything an agent produced is stripped of terminal control sequences first (``clean``): a
transcript is untrusted text, and an escape sequence in it could rewrite the operator's screen.
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only drawing an event needs rich; ``clean`` is used where nothing is drawn
    from rich.text import Text

STYLES = {
    "state": "bold magenta",
    "status": "bold cyan",
    "return": "bold green",
    "model_call": "dim blue",
    "provider_error": "yellow",
    "assistant": "bold",
    "tool_call": "white",
    "output": "dim",
    "hook": "cyan",
    "error": "bold red",
    "run_error": "bold red",
    "turn_error": "bold red",
    "say": "bold cyan",
    "respond": "bold green",
    "ask": "bold yellow",
    "human": "bold white",
    "wait": "cyan",
    "lock": "magenta",
    "write_budget": "bold yellow",
    "usage_refused": "yellow",
}

# Which field of an event's data says the most, by event type.
SUMMARY_KEYS = (
    "text",
    "message",
    "question",
    "command",
    "value",
    "reason",
    "state",
    "tool",
    "model",
    "uri",
)
# How an event is classified (``recent_events``), not what it says: left out of the line.
META_KEYS = ("level", "origin", "event")
# Output lines shown by default: the first HEAD and the last TAIL, with the cut said between.
HEAD, TAIL = 5, 15
INDENT = " " * 20  # under the text: "HH:MM:SS " and a 10-wide label
# A result that only acknowledges; the tools whose own event (status, return) says it all.
QUIET_RESULT = '{"ok": true}'
SAID_ELSEWHERE = ("set_status", "return_value")

# CSI, OSC, DCS/SOS/PM/APC strings, two-byte escapes, then any other C0/C1 control character
# except tab and newline (a carriage return would let a line overwrite the one before).
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def clean(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tab, newline kept)."""
    return _CONTROL.sub("", text)


def value_text(value: Any, limit: int | None = 80) -> str:
    """A value as a person reads it: strings bare, floats rounded, the rest as compact JSON."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)
    text = clean(text.replace("\n", "\\n"))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def _meaningful(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its classification keys and without empty values (null, "", false)."""
    return {
        k: v
        for k, v in data.items()
        if k not in META_KEYS and v is not None and v is not False and v != ""
    }


def summary(data: Any) -> str:
    """One line for an event's data: its most telling field first, then ``key=value`` pairs."""
    if not isinstance(data, dict):
        return value_text(data, None)
    data = _meaningful(data)
    for key in SUMMARY_KEYS:
        if key in data:
            rest = {k: v for k, v in data.items() if k not in (key, "output")}
            extra = " ".join(f"{k}={value_text(v)}" for k, v in rest.items())
            return f"{value_text(data[key], None)}  {extra}".rstrip()
    return " ".join(f"{k}={value_text(v)}" for k, v in data.items() if k != "output")


def cut_lines(output: str, full: bool) -> tuple[list[str], int]:
    """The lines of ``output`` to show and how many were left out (0 with ``full``)."""
    lines = clean(output).rstrip().splitlines()
    if full or len(lines) <= HEAD + TAIL + 1:
        return lines, 0
    return lines[:HEAD] + lines[-TAIL:], len(lines) - HEAD - TAIL


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _model_line(data: dict[str, Any]) -> str:
    parts = [f"{value_text(data.get('model'))}"]
    if data.get("input_tokens") or data.get("output_tokens"):
        parts.append(
            f"{data.get('input_tokens', 0)} in / {data.get('output_tokens', 0)} out tokens"
        )
    if data.get("duration_ms") is not None:
        parts.append(_duration(data["duration_ms"] / 1000))
    if data.get("cost_usd"):
        parts.append(f"${data['cost_usd']:.4f}")
    if data.get("ok") is False:
        parts.append(f"failed: {value_text(data.get('error_class') or 'error')}")
    return ", ".join(parts)


def _tool_head(data: dict[str, Any]) -> str:
    """``$ command`` for a shell call, else ``tool(arg=value, ...)``; then how it ended."""
    args = data.get("arguments") or {}
    tool = value_text(data.get("tool"))
    if isinstance(args, dict) and isinstance(args.get("command"), str) and len(args) == 1:
        head = f"$ {clean(args['command'])}"
    else:
        shown = args.items() if isinstance(args, dict) else [("", args)]
        head = f"{tool}(" + ", ".join(f"{k}={value_text(v, 60)}" for k, v in shown) + ")"
    ending = []
    if data.get("exit_code") not in (None, 0):
        ending.append(f"exit {data['exit_code']}")
    if data.get("is_error"):
        ending.append("error")
    if data.get("deferred"):
        ending.append(f"deferred: {value_text(data['deferred'])}")
    if data.get("duration") and data["duration"] >= 1:
        ending.append(_duration(data["duration"]))
    return head + (f"  ({', '.join(ending)})" if ending else "")


def _state_line(data: dict[str, Any]) -> str:
    to = data.get("to")
    line = value_text(to)
    if to == "running":
        line = "resumed" if data.get("from") == "waiting" else "started"
    if data.get("exit_code") is not None:
        line += f" (exit {data['exit_code']})"
    if data.get("reason") and data.get("reason") != "claimed":
        line += f": {value_text(data['reason'], None)}"
    return line


def _head(kind: str, data: dict[str, Any]) -> tuple[str, str]:
    """(label, text) of an event's first line."""
    if kind == "state":
        return "run", _state_line(data)
    if kind == "model_call":
        return "model", _model_line(data)
    if kind == "assistant":
        return "assistant", clean(str(data.get("text", "")))
    if kind == "tool_call":
        return "tool", _tool_head(data)
    if kind == "hook":
        head = f"{value_text(data.get('phase'))} $ {clean(str(data.get('command', '')))}"
        if data.get("exit_code") not in (None, 0):
            head += f"  (exit {data['exit_code']})"
        return "hook", head
    if kind == "return":
        return "return", value_text(data.get("value"), None)
    return kind, summary(data)


def worth_showing(event: dict[str, Any]) -> bool:
    """False for a tool call that only repeats the event before it (``set_status`` then its
    ``status`` event) and acknowledged it: the raw view (``--json``) still has it."""
    data = event.get("data")
    if event.get("type") != "tool_call" or not isinstance(data, dict):
        return True
    quiet = str(data.get("output", "")).strip() == QUIET_RESULT
    return not (quiet and data.get("tool") in SAID_ELSEWHERE)


def format_event(event: dict[str, Any], *, full: bool = False, run_id: str = "") -> Text:
    """An event as one or more lines: ``HH:MM:SS label  text`` then its output, indented.
    Without ``full`` long output keeps its first and last lines and says how many were cut
    (and that ``al logs RUN --full`` shows them)."""
    from rich.text import Text

    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("at") or 0))
    kind = str(event.get("type", "?"))
    raw = event.get("data")
    data = raw if isinstance(raw, dict) else {"value": raw}
    label, text = _head(kind, data)
    line = Text(f"{stamp} ", style="dim")
    style = "bold red" if data.get("is_error") or data.get("ok") is False else STYLES.get(kind)
    line.append(f"{label:<10} ", style=style or "white")
    first, *more = text.splitlines() or [""]
    line.append(first, style="dim" if kind == "model_call" else "")
    _indented(line, more, "")
    output = data.get("output")
    if output and str(output).strip() != QUIET_RESULT:
        lines, cut = cut_lines(str(output), full)
        if not cut:
            _indented(line, lines, "dim")
            return line
        _indented(line, lines[:HEAD], "dim")
        note = f"… {cut} more lines (`al logs {run_id or 'RUN'} --full` shows all) …"
        _indented(line, [note], "yellow")
        _indented(line, lines[HEAD:], "dim")
    return line


def _indented(line: Text, rows: list[str], style: str) -> None:
    """Append ``rows`` under the event's first line, aligned with its text."""
    if rows:
        line.append("".join("\n" + INDENT + row for row in rows), style=style)

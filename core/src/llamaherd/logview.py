"""Rendering run events for the terminal (``al run``, ``al logs``), coloured per event type."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.text import Text

STYLES = {
    "state": "bold magenta",
    "status": "bold cyan",
    "return": "bold green",
    "model_call": "blue",
    "provider_error": "yellow",
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
}

# Which field of an event's data says the most, by event type.
SUMMARY_KEYS = ("text", "message", "command", "value", "reason", "state", "tool", "model", "uri")
# How an event is classified (``recent_events``), not what it says: left out of the line.
META_KEYS = ("level", "origin", "event")


def summary(data: Any) -> str:
    if not isinstance(data, dict):
        return json.dumps(data)
    data = {k: v for k, v in data.items() if k not in META_KEYS}
    for key in SUMMARY_KEYS:
        if key in data and data[key] not in (None, ""):
            head = data[key] if isinstance(data[key], str) else json.dumps(data[key])
            rest = {k: v for k, v in data.items() if k != key and k not in ("output",)}
            extra = " ".join(f"{k}={_short(v)}" for k, v in rest.items())
            return f"{head}  {extra}".rstrip()
    return " ".join(f"{k}={_short(v)}" for k, v in data.items())


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_event(event: dict[str, Any]) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("at") or 0))
    kind = str(event.get("type", "?"))
    line = Text(f"{stamp} ", style="dim")
    line.append(f"{kind:<14}", style=STYLES.get(kind, "white"))
    line.append(summary(event.get("data") or {}))
    output = (
        (event.get("data") or {}).get("output") if isinstance(event.get("data"), dict) else None
    )
    if output:
        line.append(
            "\n" + "\n".join("    " + row for row in str(output).rstrip().splitlines()[-20:]),
            style="dim",
        )
    return line

"""Durations as people write them in config and on the command line: 90, "30s", "10m", "2h",
"7d", and sums such as "1h30m" (as Action Llama's ``wait_for_trigger`` timeouts)."""

from __future__ import annotations

import re

from llamaherd.errors import LlamaherdError

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
PART = r"\d+(?:\.\d+)?\s*(?:ms|s|m|h|d|w)"
COMPOUND = re.compile(rf"^\s*(?:{PART}\s*){{2,}}$")


def parse_duration(value: str | float | int, where: str = "duration") -> float:
    """Seconds in ``value``; a bare number is seconds. Raises a one-line error naming ``where``."""
    if isinstance(value, bool):
        raise LlamaherdError(f"{where}: expected a duration like 30s, 10m, 2h, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = PATTERN.match(str(value))
        if match:
            seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
        elif COMPOUND.match(str(value)):
            parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", str(value))
            seconds = sum(float(number) * UNITS[unit] for number, unit in parts)
        else:
            raise LlamaherdError(f"{where}: expected a duration like 30s, 10m, 2h, got {value!r}")
    if seconds <= 0:
        raise LlamaherdError(f"{where}: expected a positive duration, got {value!r}")
    return seconds


def parse_since(value: str, where: str = "--since", now: float | None = None) -> float:
    """The moment ``value`` names, as epoch seconds: a duration back from now ("2h", "7d") or
    an ISO 8601 date or time ("2026-01-15", "2026-01-15T08:00", with or without an offset;
    local time when it has none)."""
    import time
    from datetime import datetime

    if PATTERN.match(str(value)):
        return (time.time() if now is None else now) - parse_duration(value, where)
    try:
        return datetime.fromisoformat(str(value).strip()).timestamp()
    except ValueError:
        raise LlamaherdError(
            f"{where}: expected a duration back from now (30m, 2h, 7d) or an ISO date or time "
            f"(2026-01-15, 2026-01-15T08:00), got {value!r}"
        ) from None

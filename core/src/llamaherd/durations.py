"""Durations as people write them in config and on the command line: 90, "30s", "10m", "2h", "7d"."""

from __future__ import annotations

import re

from llamaherd.types import LlamaherdError

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(value: str | float | int, where: str = "duration") -> float:
    """Seconds in ``value``; a bare number is seconds. Raises a one-line error naming ``where``."""
    if isinstance(value, bool):
        raise LlamaherdError(f"{where}: expected a duration like 30s, 10m, 2h, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = PATTERN.match(str(value))
        if not match:
            raise LlamaherdError(f"{where}: expected a duration like 30s, 10m, 2h, got {value!r}")
        seconds = float(match.group(1)) * UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise LlamaherdError(f"{where}: expected a positive duration, got {value!r}")
    return seconds

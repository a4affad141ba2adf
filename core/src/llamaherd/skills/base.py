"""A small LanguageSkill implementation shared by core's skills."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llamaherd.types import Tool


@dataclass
class CoreSkill:
    """A LanguageSkill whose preamble is fixed text."""

    name: str
    category: str
    text: str
    tools: list[Tool] = field(default_factory=list)

    def preamble(self, run: Any) -> str:
        return self.text


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """JSON Schema of a tool's arguments object."""
    return {"type": "object", "properties": properties, "required": list(required)}


# What a run may store through a tool or its shell command, in characters: a sandboxed agent
# must not grow the database without bound (the HTTP server caps whole request bodies).
MAX_STATUS = 2_000
MAX_RETURN = 64_000  # the value as JSON
MAX_CALL_CONTEXT = 64_000
MAX_REASON = 2_000
MAX_LOCK_URI = 2_000


def capped(what: str, text: str, limit: int) -> str:
    """``text``, or a ValueError (the tool's error, the gateway's 400) when it is too long."""
    if len(text) > limit:
        raise ValueError(
            f"{what} is {len(text):,} characters; the limit is {limit:,}: shorten it "
            "(put long output in a file and give its path)"
        )
    return text


def refuse(error: str, **extra: Any) -> dict[str, Any]:
    """A refused action: ``ok`` false with a one-line reason (the gateway answers 409)."""
    return {"ok": False, "error": error, **extra}

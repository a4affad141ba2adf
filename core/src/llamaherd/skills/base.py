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


def refuse(error: str, **extra: Any) -> dict[str, Any]:
    """A refused action: ``ok`` false with a one-line reason (the gateway answers 409)."""
    return {"ok": False, "error": error, **extra}

"""Core's built-in trigger types: manual (``al run``) and agent calls (``call_agent``)."""

from __future__ import annotations

from llamaherd import hookimpl

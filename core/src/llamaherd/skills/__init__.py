"""Core's language skills: signals, calls, wait, locks, state."""

from __future__ import annotations

from llamaherd import hookimpl

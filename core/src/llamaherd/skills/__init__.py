"""Core's language skills: signals, calls, wait, locks, states, events.

Each is a LanguageSkill (preamble + tools) registered through the same hook as any plugin's; the
same handlers serve the model's tool calls and the gateway endpoints of the sandbox commands.
"""

from __future__ import annotations

from llamaherd import hookimpl

SKILL_MODULES = ("signals", "calls", "wait", "locks", "states", "events")


@hookimpl
def register_language_skills(register):
    import importlib

    for name in SKILL_MODULES:
        register(importlib.import_module(f"llamaherd.skills.{name}").SKILL)

"""Fake plugin objects for validation tests: real registration through a private manager."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llamaherd import hookimpl
from llamaherd.plugins import PluginManager

RUNTIME_SCHEMA = {
    "type": "object",
    "properties": {
        "run_as": {"type": "string"},
        "groups": {"type": "array", "items": {"type": "string"}},
    },
}


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


# Every member a protocol of llamaherd.types requires, so one stand-in registers as any kind.
STUB_MEMBERS: dict[str, Any] = {
    "credential_type": None,
    "fields": [],
    "tools": [],
    "category": "test",
    **{
        method: _nothing
        for method in (
            "start", "stop", "prepare", "attach", "cleanup_orphans", "complete", "verify",
            "parse", "env", "context", "preamble",
        )
    },
}  # fmt: skip


def thing(name: str, schema: dict[str, Any] | None = None, **extra: Any) -> SimpleNamespace:
    """A registrable object: a name, a schema fragment, anything else the test needs."""
    members = {**STUB_MEMBERS, **extra}
    return SimpleNamespace(name=name, description=f"test {name}", schema=schema or {}, **members)


class FakePlugin:
    """Registers whatever it is given, through the real hooks."""

    def __init__(self, **kinds: list[Any]):
        self.kinds = kinds

    def _register(self, kind: str, register: Any) -> None:
        for obj in self.kinds.get(kind, []):
            register(obj)

    @hookimpl
    def register_runtimes(self, register):
        self._register("runtimes", register)

    @hookimpl
    def register_providers(self, register):
        self._register("providers", register)

    @hookimpl
    def register_trigger_types(self, register):
        self._register("trigger_types", register)

    @hookimpl
    def register_webhook_sources(self, register):
        self._register("webhook_sources", register)

    @hookimpl
    def register_credential_types(self, register):
        self._register("credential_types", register)


def standard_kinds() -> dict[str, list[Any]]:
    """Stand-ins for the first-party plugins, with fragments shaped like theirs."""
    return {
        "runtimes": [
            thing("host-user", RUNTIME_SCHEMA),
            thing("container", {"image": {"type": "string"}}),
        ],
        "providers": [thing("anthropic"), thing("openai")],
        "trigger_types": [
            thing("cron", {"schedule": {"type": "string"}, "timezone": {"type": "string"}}),
            thing(
                "webhooks",
                {
                    "webhooks": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "source": {"type": "string"},
                                "events": {"type": "array"},
                            },
                            "required": ["source"],
                            "additionalProperties": False,
                        },
                    }
                },
            ),
        ],
        "webhook_sources": [thing("github", {"events": {"type": "array"}}, credential_type=None)],
        "credential_types": [thing("github_token"), thing("git_ssh")],
    }


@pytest.fixture
def make_registry():
    """``make_registry(**kinds)``: a registry of core's built-ins plus one fake plugin, with no
    entry points (so the installed plugins never leak in). No kinds: the standard stand-ins."""

    def make(**kinds: list[Any]) -> Any:
        manager = PluginManager(load_entrypoints=False)
        manager.register(FakePlugin(**(kinds or standard_kinds())), "fake")
        return manager.registry()

    return make

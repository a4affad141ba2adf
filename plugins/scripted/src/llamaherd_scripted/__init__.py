"""llamaherd-scripted: a deterministic, offline model for the demo and for tests.

It replays ``script.toml`` from the agent's folder (see the README), or, with no script,
reports the trigger with ``set_status``, returns a summary with ``return_value`` and ends.
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Message, ModelConfig, Pricing, Reply, ToolSpec

SCHEMA: dict[str, Any] = {
    "script": {
        "type": "string",
        "default": "script.toml",
        "description": "Script file, relative to the agent's folder.",
    },
}


class ScriptedProvider:
    """Answers from a script: no network, no key, the same reply for the same transcript."""

    name = "scripted"
    description = "Deterministic offline replies from the agent's script.toml (demo, tests)."
    schema = SCHEMA
    credential_type = None
    prices = {"*": Pricing(0.0, 0.0)}  # offline: every call is free (unless a table says otherwise)

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_scripted.script import complete

        return complete(messages, tools, model, options)


@hookimpl
def register_providers(register: Any) -> None:
    register(ScriptedProvider())

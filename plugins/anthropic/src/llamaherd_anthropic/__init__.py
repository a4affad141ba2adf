"""llamaherd-anthropic: the Anthropic Messages API with tool use, and the ``anthropic_key``
credential type.

Importing this module is cheap: ``requests`` and the wire code load on the first model call.
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Message, ModelConfig, ModelKey, Pricing, Reply, ToolSpec

SCHEMA: dict[str, Any] = {
    "timeout": {
        "type": "number",
        "exclusiveMinimum": 0,
        "default": 300,
        "description": "Seconds to wait for a reply (read timeout).",
    },
    "prompt_cache": {
        "type": "boolean",
        "default": True,
        "description": "Mark the system prompt and the transcript's end for prompt caching.",
    },
}


class AnthropicProvider:
    """Claude models through ``POST /v1/messages``."""

    name = "anthropic"
    description = "Anthropic Messages API with tool use (authType api_key or oauth_token)."
    schema = SCHEMA
    credential_type = "anthropic_key"
    key_env = "ANTHROPIC_API_KEY"

    @property
    def prices(self) -> dict[str, Pricing]:
        from llamaherd_anthropic.prices import PRICES

        return PRICES

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_anthropic.messages import complete

        return complete(messages, tools, model)


@hookimpl
def register_providers(register: Any) -> None:
    register(AnthropicProvider())


@hookimpl
def register_credential_types(register: Any) -> None:
    register(
        ModelKey(
            "anthropic_key",
            'Anthropic API key for models with provider = "anthropic".',
            "API key (sk-ant-...) or OAuth token",
        )
    )

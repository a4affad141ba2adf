"""llamaherd-google: Google's Gemini API (``generateContent``) with function calling, and the
``google_key`` credential type (Action Llama's name; a Google AI Studio key).

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
    "thinking_budget": {
        "type": "integer",
        "minimum": -1,
        "description": "Gemini 2.5 thinking budget in tokens (0 off, -1 dynamic); overrides the "
        "budget `thinkingLevel` picks.",
    },
}


class GoogleProvider:
    """Gemini models through ``POST {base_url}/models/{model}:generateContent``."""

    name = "google"
    description = "Google Gemini API (generateContent) with function calling."
    schema = SCHEMA
    credential_type = "google_key"
    key_env = "GEMINI_API_KEY"

    @property
    def prices(self) -> dict[str, Pricing]:
        from llamaherd_google.prices import PRICES

        return PRICES

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_google.gemini import complete

        return complete(messages, tools, model)


@hookimpl
def register_providers(register: Any) -> None:
    register(GoogleProvider())


@hookimpl
def register_credential_types(register: Any) -> None:
    register(
        ModelKey(
            "google_key",
            'Google AI Studio API key for models with provider = "google" (Gemini).',
            "Google AI Studio API key",
        )
    )

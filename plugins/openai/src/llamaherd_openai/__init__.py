"""llamaherd-openai: OpenAI-compatible Chat Completions with tools, as six providers over one
client: ``openai`` (any ``base_url``: OpenAI, Ollama, vLLM, llama.cpp server, ...), ``groq``,
``mistral``, ``openrouter``, ``xai`` and ``custom`` (any endpoint, ``base_url`` required), each
with its key credential type (``openai_key``, ``groq_key``, ``mistral_key``, ``openrouter_key``,
``xai_key``, ``custom_key``: Action Llama's names, ``<provider>_key``).

What differs per service is a ``Preset`` (``presets.py``). Importing this module is cheap:
``requests`` and the wire code load on the first model call, the price tables on first use.
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Message, ModelConfig, ModelKey, Pricing, Reply, ToolSpec
from llamaherd_openai.presets import PRESETS, Preset

SCHEMA: dict[str, Any] = {
    "timeout": {
        "type": "number",
        "exclusiveMinimum": 0,
        "default": 300,
        "description": "Seconds to wait for a reply (read timeout).",
    },
    "headers": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Extra HTTP headers for every request (e.g. OpenRouter's HTTP-Referer).",
    },
}


class ChatCompletionsProvider:
    """A service speaking ``POST {base_url}/chat/completions``, as its ``Preset`` says."""

    schema = SCHEMA

    def __init__(self, preset: Preset):
        self.preset = preset
        self.name = preset.name
        self.description = preset.description
        self.credential_type: str | None = preset.credential_type
        self.key_env = preset.key_env
        self.key_required = preset.key_required

    @property
    def prices(self) -> dict[str, Pricing]:
        from llamaherd_openai.prices import PRICES

        return PRICES.get(self.name, {})

    def validate(self, model: ModelConfig) -> list[str]:
        if self.preset.base_url is None and not model.base_url:
            return [
                f'provider = "{self.name}" needs base_url (or baseUrl): the endpoint\'s URL, '
                'e.g. "https://llm.example.com/v1"'
            ]
        return []

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_openai.chat import complete

        return complete(messages, tools, model, self.preset)


@hookimpl
def register_providers(register: Any) -> None:
    for preset in PRESETS:
        register(ChatCompletionsProvider(preset))


@hookimpl
def register_credential_types(register: Any) -> None:
    for preset in PRESETS:
        register(ModelKey(preset.credential_type, preset.key_description, preset.key_hint))

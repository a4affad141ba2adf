"""llamaherd-openai: OpenAI-compatible Chat Completions with tools at any ``base_url`` (OpenAI,
OpenRouter, Ollama, vLLM, llama.cpp server, ...), and the ``openai_key`` credential type.

The key is optional: without one no Authorization header is sent, as local servers expect.
Importing this module is cheap: ``requests`` and the wire code load on the first model call.
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Message, ModelConfig, ModelKey, Reply, ToolSpec

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


class OpenAIProvider:
    """Any server speaking ``POST {base_url}/chat/completions``."""

    name = "openai"
    description = "OpenAI-compatible Chat Completions with tools; any base_url, key optional."
    schema = SCHEMA
    credential_type = "openai_key"
    key_env = "OPENAI_API_KEY"
    key_required = False

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_openai.chat import complete

        return complete(messages, tools, model)


@hookimpl
def register_providers(register: Any) -> None:
    register(OpenAIProvider())


@hookimpl
def register_credential_types(register: Any) -> None:
    register(
        ModelKey(
            "openai_key",
            'Bearer key for models with provider = "openai" (optional for local servers).',
            "API key (sk-...)",
        )
    )

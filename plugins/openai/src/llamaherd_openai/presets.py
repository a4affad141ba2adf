"""The services this plugin serves over one Chat Completions client: what differs per service.

A ``Preset`` is a provider name with its default base URL, key credential type and env var,
how ``max_tokens`` and ``thinkingLevel`` are spelled in its requests, and its own verdict on
error replies (``classify``). Everything else — messages, tools, tool-call parsing, usage — is
the shared wire format in ``chat.py``. Importing this module is cheap (no HTTP stack).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamaherd.api import AuthError, ModelConfig, ProviderError, Transient, Unavailable

Classify = Callable[[int, str], "type[ProviderError] | None"]
# thinkingLevel ("off", "minimal", ... "xhigh") and model id -> the request keys that say it.
Reasoning = Callable[[str, str], dict[str, Any]]

# Chat Completions' reasoning_effort: low, medium, high (minimal on newer OpenAI models).
EFFORT = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


def reasoning_effort(level: str, model_id: str) -> dict[str, Any]:
    """OpenAI's ``reasoning_effort``; "off" sends nothing (older reasoning models refuse
    "none", so the model's default stands)."""
    effort = EFFORT.get(level)
    return {"reasoning_effort": effort} if effort else {}


def groq_reasoning(level: str, model_id: str) -> dict[str, Any]:
    """Groq: Qwen 3 models take "none" or "default"; gpt-oss models low, medium or high."""
    if "qwen" in model_id.lower():
        return {"reasoning_effort": "none" if level == "off" else "default"}
    effort = {"minimal": "low", "xhigh": "high"}.get(level, level)
    return {"reasoning_effort": effort} if effort in ("low", "medium", "high") else {}


def mistral_reasoning(level: str, model_id: str) -> dict[str, Any]:
    """Mistral's adjustable reasoning has two settings: "high" and "none"."""
    return {"reasoning_effort": "none" if level == "off" else "high"}


def openrouter_reasoning(level: str, model_id: str) -> dict[str, Any]:
    """OpenRouter's normalised ``reasoning`` object takes every level, "none" for off."""
    return {"reasoning": {"effort": "none" if level == "off" else level}}


def xai_reasoning(level: str, model_id: str) -> dict[str, Any]:
    """xAI's ``reasoning_effort``: none, low, medium, high (models without it refuse it)."""
    effort = {"off": "none", "minimal": "low", "xhigh": "high"}.get(level, level)
    return {"reasoning_effort": effort}


def openai_verdict(status: int, body: str) -> type[ProviderError] | None:
    # OpenAI says 429 for an exhausted quota too; waiting will not refill it.
    return Unavailable if status == 429 and "insufficient_quota" in body else None


def groq_verdict(status: int, body: str) -> type[ProviderError] | None:
    if status == 498:  # flex tier at capacity: Groq's own code, meant to be retried
        return Transient
    if status == 413:  # larger than the model's per-minute token limit: another model may take it
        return Unavailable
    return None


def openrouter_verdict(status: int, body: str) -> type[ProviderError] | None:
    # 402: out of credits; 403: the input was flagged by the model's moderation; 503: no
    # provider can serve the model now. Another model in the chain may still answer.
    return Unavailable if status in (402, 403, 503) else None


def xai_verdict(status: int, body: str) -> type[ProviderError] | None:
    lowered = body.lower()
    if status == 400 and "incorrect api key" in lowered:  # xAI says 400 for a bad key
        return AuthError
    if status == 403 and ("credits" in lowered or "spending limit" in lowered):
        return Unavailable
    return None


def mistral_call_id(call_id: str) -> str:
    """Mistral takes tool-call ids of exactly nine letters and digits; ids from another model
    (after a fallback) are mapped to a stable one of that shape."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def openai_max_tokens_key(model: ModelConfig) -> str:
    # api.openai.com wants the newer name (reasoning models refuse max_tokens); compatible
    # servers behind a base_url know the classic one.
    return "max_tokens" if model.base_url else "max_completion_tokens"


def classic_max_tokens_key(model: ModelConfig) -> str:
    return "max_tokens"


def _no_verdict(status: int, body: str) -> type[ProviderError] | None:
    return None


@dataclass(frozen=True)
class Preset:
    name: str  # the provider name in [models.<name>] provider = ...
    description: str
    credential_type: str
    key_description: str  # the credential's description
    key_hint: str  # its token field's description
    key_env: str
    base_url: str | None  # default base URL; None: the model table must set one
    key_required: bool = True
    reasoning: Reasoning = reasoning_effort
    classify: Classify = _no_verdict
    max_tokens_key: Callable[[ModelConfig], str] = classic_max_tokens_key
    call_id: Callable[[str], str] | None = None  # rewrites tool-call ids the service refuses
    reports_cost: bool = False  # usage.cost is the call's price in USD
    body: dict[str, Any] = field(default_factory=dict)  # sent with every request


PRESETS = (
    Preset(
        "openai",
        "OpenAI Chat Completions with tools; any compatible server via base_url, key optional.",
        "openai_key",
        'Bearer key for models with provider = "openai" (optional for local servers).',
        "API key (sk-...)",
        "OPENAI_API_KEY",
        "https://api.openai.com/v1",
        key_required=False,
        classify=openai_verdict,
        max_tokens_key=openai_max_tokens_key,
    ),
    Preset(
        "groq",
        "Groq (OpenAI-compatible Chat Completions, fast inference).",
        "groq_key",
        'API key for models with provider = "groq".',
        "Groq API key (gsk_...)",
        "GROQ_API_KEY",
        "https://api.groq.com/openai/v1",
        reasoning=groq_reasoning,
        classify=groq_verdict,
        max_tokens_key=lambda model: "max_completion_tokens",
    ),
    Preset(
        "mistral",
        "Mistral AI (OpenAI-compatible Chat Completions).",
        "mistral_key",
        'API key for models with provider = "mistral".',
        "Mistral AI API key",
        "MISTRAL_API_KEY",
        "https://api.mistral.ai/v1",
        reasoning=mistral_reasoning,
        call_id=mistral_call_id,
    ),
    Preset(
        "openrouter",
        "OpenRouter: many providers' models behind one OpenAI-compatible API; reports each "
        "call's cost.",
        "openrouter_key",
        'API key for models with provider = "openrouter".',
        "OpenRouter API key (sk-or-...)",
        "OPENROUTER_API_KEY",
        "https://openrouter.ai/api/v1",
        reasoning=openrouter_reasoning,
        classify=openrouter_verdict,
        reports_cost=True,
        body={"usage": {"include": True}},  # ask for usage.cost in every reply
    ),
    Preset(
        "xai",
        "xAI Grok models (OpenAI-compatible Chat Completions).",
        "xai_key",
        'API key for models with provider = "xai".',
        "xAI API key (xai-...)",
        "XAI_API_KEY",
        "https://api.x.ai/v1",
        reasoning=xai_reasoning,
        classify=xai_verdict,
    ),
    Preset(
        "custom",
        "Any other OpenAI-compatible endpoint: base_url required, key optional.",
        "custom_key",
        'API key for models with provider = "custom" (optional).',
        "API key of your OpenAI-compatible endpoint",
        "CUSTOM_API_KEY",
        None,
        key_required=False,
        classify=openai_verdict,
    ),
)

"""The Messages API wire format: normalised messages in, a normalised Reply out.

Thinking blocks must be sent back with the assistant turn that produced them while a tool-use
loop goes on. They travel in ``provider_data["anthropic"]["thinking"]`` of the Reply and of
the assistant Message the session records; when a transcript lacks them (an older checkpoint),
the turn is sent without thinking rather than rejected by the API.
"""

from __future__ import annotations

from typing import Any

from llamaherd.api import (
    Fatal,
    Message,
    ModelConfig,
    ProviderError,
    Reply,
    ToolCall,
    ToolSpec,
    Unavailable,
    Usage,
    http_timeout,
    post_json,
)

PROVIDER = "anthropic"
DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192
# thinkingLevel -> budget_tokens; max_tokens is raised above the budget when needed.
THINKING_BUDGETS = {"minimal": 1024, "low": 4096, "medium": 10000, "high": 20000, "xhigh": 32000}
EPHEMERAL = {"type": "ephemeral"}


def complete(messages: list[Message], tools: list[ToolSpec], model: ModelConfig) -> Reply:
    """One ``POST /v1/messages`` turn."""
    base_url = (model.base_url or DEFAULT_BASE_URL).rstrip("/")
    data = post_json(
        PROVIDER,
        f"{base_url}/v1/messages",
        headers(model),
        request_body(messages, tools, model),
        timeout=http_timeout(model),
        secrets=[model.api_key, model.base_url],
        classify=_classify,
    )
    return parse_reply(data)


def headers(model: ModelConfig) -> dict[str, str]:
    common = {"anthropic-version": API_VERSION, "content-type": "application/json"}
    auth = model.auth_type or "api_key"
    # pi_auth is Action Llama's pi login file, which llamaherd does not read: the stored key
    # is used as with api_key (`al validate` says so).
    if auth in ("api_key", "pi_auth"):
        return {**common, "x-api-key": model.api_key or ""}
    if auth == "oauth_token":
        return {
            **common,
            "authorization": f"Bearer {model.api_key}",
            "anthropic-beta": "oauth-2025-04-20",
        }
    raise Fatal(f"{PROVIDER}: authType {auth!r} is not supported (api_key, oauth_token, pi_auth)")


def _classify(status: int, body: str) -> type[ProviderError] | None:
    # A 400 about the credit balance will not clear within a retry window: fall back.
    if status == 400 and "credit balance" in body.lower():
        return Unavailable
    return None


def request_body(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig
) -> dict[str, Any]:
    """The JSON body of one Messages API request."""
    system, wire = convert_messages(messages)
    cache = bool(model.extra.get("prompt_cache", True))
    max_tokens = model.max_tokens or DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {"model": model.model, "max_tokens": max_tokens, "messages": wire}
    if system:
        body["system"] = [_cached({"type": "text", "text": system}, cache)]
    if tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in tools
        ]
    budget = THINKING_BUDGETS.get(model.thinking_level or "off")
    if budget and _can_think(messages):
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(max_tokens, budget + DEFAULT_MAX_TOKENS)
    elif model.temperature is not None:  # the API refuses a temperature with thinking
        body["temperature"] = model.temperature
    if cache and wire:
        # A breakpoint at the transcript's end lets the next turn read everything before it.
        _cached(wire[-1]["content"][-1], True)
    return body


def _cached(block: dict[str, Any], cache: bool) -> dict[str, Any]:
    if cache:
        block["cache_control"] = EPHEMERAL
    return block


def _thinking(message: Message) -> list[dict[str, Any]]:
    data = getattr(message, "provider_data", None) or {}
    return list(data.get(PROVIDER, {}).get("thinking", []))


def _can_think(messages: list[Message]) -> bool:
    """False when the last assistant turn used tools but its thinking blocks are lost."""
    for message in reversed(messages):
        if message.role == "assistant":
            return not message.tool_calls or bool(_thinking(message))
    return True


def convert_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, wire messages). Consecutive tool results share one user message."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            system.append(message.content)
        elif message.role == "tool":
            _add_tool_result(wire, message)
        elif message.role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:
                wire.append({"role": "assistant", "content": blocks})
        elif message.role == "user":
            if message.content:
                wire.append(
                    {"role": "user", "content": [{"type": "text", "text": message.content}]}
                )
        else:
            raise Fatal(f"{PROVIDER}: cannot send a message with role {message.role!r}")
    return "\n\n".join(part for part in system if part), wire


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks = _thinking(message)
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _add_tool_result(wire: list[dict[str, Any]], message: Message) -> None:
    if not message.tool_call_id:
        raise Fatal(f"{PROVIDER}: a tool result has no tool_call_id")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    if message.content:
        block["content"] = message.content
    if message.is_error:
        block["is_error"] = True
    last = wire[-1] if wire else None
    if last and last["role"] == "user" and all(b["type"] == "tool_result" for b in last["content"]):
        last["content"].append(block)
    else:
        wire.append({"role": "user", "content": [block]})


def parse_reply(data: dict[str, Any]) -> Reply:
    """A Reply from a Messages API response; any other shape is Fatal."""
    content = data.get("content")
    if data.get("type", "message") != "message" or not isinstance(content, list):
        raise Fatal(f"{PROVIDER}: unexpected reply (expected a message with a content list)")
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append(block)
        else:
            raise Fatal(f"{PROVIDER}: unexpected content block {kind!r} in reply")
    reply = Reply(
        text="".join(texts),
        tool_calls=calls,
        usage=_usage(data.get("usage")),
        stop_reason=data.get("stop_reason"),
    )
    if thinking:
        reply.provider_data = {PROVIDER: {"thinking": thinking}}
    return reply


def _tool_call(block: dict[str, Any]) -> ToolCall:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise Fatal(
            f"{PROVIDER}: unexpected tool_use block (expected id, name and an input object)"
        )
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()

    def count(key: str) -> int:  # as reported: core refuses a count that cannot be right
        value = usage.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else 0

    # input_tokens counts only what came after the last cache breakpoint; the prompt is all three.
    read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
    return Usage(
        input_tokens=count("input_tokens") + read + written,
        output_tokens=count("output_tokens"),
        cached_input_tokens=read,
        cache_write_tokens=written,
    )

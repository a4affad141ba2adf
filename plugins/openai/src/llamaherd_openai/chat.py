"""The Chat Completions wire format: normalised messages in, a normalised Reply out.

Tool-call arguments arrive as a JSON string. When that string is not a JSON object the call is
kept, with ``{INVALID_ARGUMENTS: "<what was wrong>"}`` as its arguments, so the session answers
the model with an error result and the model can try again; one malformed call does not end
the run.

The services differ in the details a ``Preset`` carries (``presets.py``); this module is the
part they share.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from llamaherd.api import (
    INVALID_ARGUMENTS,
    Fatal,
    Message,
    ModelConfig,
    Reply,
    ToolCall,
    ToolSpec,
    Usage,
    http_error,
    http_timeout,
    post_json,
)
from llamaherd_openai.presets import Preset


def complete(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig, preset: Preset
) -> Reply:
    """One ``POST {base_url}/chat/completions`` turn for ``preset``'s service."""
    base_url = (model.base_url or preset.base_url or "").rstrip("/")
    if not base_url:
        raise Fatal(f"{preset.name}: no base_url set for model {model.name!r}")
    secrets = [model.api_key, model.base_url]
    data = post_json(
        preset.name,
        f"{base_url}/chat/completions",
        headers(model),
        request_body(messages, tools, model, preset),
        timeout=http_timeout(model),
        secrets=secrets,
        classify=preset.classify,
    )
    if "choices" not in data and "error" in data:
        # Some gateways (OpenRouter) answer 200 with an error object carrying the real status.
        code = data["error"].get("code") if isinstance(data["error"], dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        text = json.dumps(data)
        raise http_error(preset.name, status, {}, text, secrets, preset.classify(status, text))
    return parse_reply(data, preset)


def headers(model: ModelConfig) -> dict[str, str]:
    result = {"content-type": "application/json", **model.extra.get("headers", {})}
    if model.api_key:
        result["authorization"] = f"Bearer {model.api_key}"
    return result


def request_body(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig, preset: Preset
) -> dict[str, Any]:
    """The JSON body of one Chat Completions request."""
    wire_id = preset.call_id or str
    body: dict[str, Any] = {
        "model": model.model,
        "messages": [_wire(m, preset.name, wire_id) for m in messages],
        **preset.body,
    }
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in tools
        ]
    if model.max_tokens:
        body[preset.max_tokens_key(model)] = model.max_tokens
    if model.temperature is not None:
        body["temperature"] = model.temperature
    if model.thinking_level:
        body.update(preset.reasoning(model.thinking_level, model.model))
    return body


def _wire(message: Message, provider: str, wire_id: Callable[[str], str]) -> dict[str, Any]:
    if message.role in ("system", "user"):
        return {"role": message.role, "content": message.content}
    if message.role == "assistant":
        wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": wire_id(call.id),
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        return wire
    if message.role == "tool":
        if not message.tool_call_id:
            raise Fatal(f"{provider}: a tool result has no tool_call_id")
        # Chat Completions has no error flag on tool results; say it in the text.
        content = f"ERROR: {message.content}" if message.is_error else message.content
        return {"role": "tool", "tool_call_id": wire_id(message.tool_call_id), "content": content}
    raise Fatal(f"{provider}: cannot send a message with role {message.role!r}")


def parse_reply(data: dict[str, Any], preset: Preset) -> Reply:
    """A Reply from a Chat Completions response; any other shape is Fatal."""
    provider = preset.name
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise Fatal(f"{provider}: unexpected reply (expected choices[0].message)")
    text = message.get("content") or ""
    raw_calls = message.get("tool_calls") or []
    if not isinstance(text, str) or not isinstance(raw_calls, list):
        raise Fatal(f"{provider}: unexpected reply (content must be text, tool_calls a list)")
    return Reply(
        text=text,
        tool_calls=[_tool_call(provider, raw, index) for index, raw in enumerate(raw_calls)],
        usage=_usage(data.get("usage"), preset.reports_cost),
        stop_reason=choice.get("finish_reason"),
    )


def _tool_call(provider: str, raw: Any, index: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise Fatal(f"{provider}: unexpected tool call (expected function.name)")
    # Some local servers leave out the id; the transcript still needs one to pair the result.
    call_id = raw.get("id") or f"call_{index}"
    return ToolCall(id=str(call_id), name=name, arguments=_arguments(function.get("arguments")))


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # Ollama's older servers send an object, not a string
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return {INVALID_ARGUMENTS: f"arguments are not valid JSON ({exc.msg} at char {exc.pos})"}
    if not isinstance(value, dict):
        return {INVALID_ARGUMENTS: f"arguments must be a JSON object, not {type(value).__name__}"}
    return value


def _count(value: Any) -> int:
    """A count as the API reported it, any number (core refuses one that cannot be right:
    ``llamaherd.usage``); 0 when absent."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _usage(usage: Any, reports_cost: bool) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    # Some services (xAI) leave reasoning tokens out of completion_tokens but not out of
    # total_tokens; they are billed as output either way.
    output = max(completion, _count(usage.get("total_tokens")) - prompt)
    cost = usage.get("cost") if reports_cost else None
    return Usage(
        input_tokens=prompt,
        output_tokens=output,
        cached_input_tokens=min(cached, prompt),
        cost_usd=float(cost)
        if isinstance(cost, int | float) and not isinstance(cost, bool)
        else None,
    )

"""The Chat Completions wire format: normalised messages in, a normalised Reply out.

Tool-call arguments arrive as a JSON string. When that string is not a JSON object the call is
kept, with ``{INVALID_ARGUMENTS: "<what was wrong>"}`` as its arguments, so the session answers
the model with an error result and the model can try again; one malformed call does not end
the run.
"""

from __future__ import annotations

import json
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

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# thinkingLevel -> reasoning_effort (sent only when thinkingLevel is set and not "off").
EFFORT = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


def complete(messages: list[Message], tools: list[ToolSpec], model: ModelConfig) -> Reply:
    """One ``POST {base_url}/chat/completions`` turn."""
    base_url = (model.base_url or DEFAULT_BASE_URL).rstrip("/")
    secrets = [model.api_key, model.base_url]
    data = post_json(
        PROVIDER,
        f"{base_url}/chat/completions",
        headers(model),
        request_body(messages, tools, model),
        timeout=http_timeout(model),
        secrets=secrets,
        unavailable=_out_of_quota,
    )
    if "choices" not in data and "error" in data:
        # Some gateways (OpenRouter) answer 200 with an error object carrying the real status.
        code = data["error"].get("code") if isinstance(data["error"], dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 502
        raise http_error(PROVIDER, status, {}, json.dumps(data), secrets)
    return parse_reply(data)


def headers(model: ModelConfig) -> dict[str, str]:
    result = {"content-type": "application/json", **model.extra.get("headers", {})}
    if model.api_key:
        result["authorization"] = f"Bearer {model.api_key}"
    return result


def _out_of_quota(status: int, body: str) -> bool:
    # OpenAI says 429 for an exhausted quota too; waiting will not refill it.
    return status == 429 and "insufficient_quota" in body


def request_body(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig
) -> dict[str, Any]:
    """The JSON body of one Chat Completions request."""
    body: dict[str, Any] = {"model": model.model, "messages": [_wire(m) for m in messages]}
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
        # api.openai.com wants the newer name (reasoning models refuse max_tokens); compatible
        # servers know the classic one.
        key = "max_tokens" if model.base_url else "max_completion_tokens"
        body[key] = model.max_tokens
    if model.temperature is not None:
        body["temperature"] = model.temperature
    effort = EFFORT.get(model.thinking_level or "off")
    if effort:
        body["reasoning_effort"] = effort
    return body


def _wire(message: Message) -> dict[str, Any]:
    if message.role in ("system", "user"):
        return {"role": message.role, "content": message.content}
    if message.role == "assistant":
        wire: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        return wire
    if message.role == "tool":
        if not message.tool_call_id:
            raise Fatal(f"{PROVIDER}: a tool result has no tool_call_id")
        # Chat Completions has no error flag on tool results; say it in the text.
        content = f"ERROR: {message.content}" if message.is_error else message.content
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    raise Fatal(f"{PROVIDER}: cannot send a message with role {message.role!r}")


def parse_reply(data: dict[str, Any]) -> Reply:
    """A Reply from a Chat Completions response; any other shape is Fatal."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise Fatal(f"{PROVIDER}: unexpected reply (expected choices[0].message)")
    text = message.get("content") or ""
    raw_calls = message.get("tool_calls") or []
    if not isinstance(text, str) or not isinstance(raw_calls, list):
        raise Fatal(f"{PROVIDER}: unexpected reply (content must be text, tool_calls a list)")
    return Reply(
        text=text,
        tool_calls=[_tool_call(raw, index) for index, raw in enumerate(raw_calls)],
        usage=_usage(data.get("usage")),
        stop_reason=choice.get("finish_reason"),
    )


def _tool_call(raw: Any, index: int) -> ToolCall:
    function = raw.get("function") if isinstance(raw, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise Fatal(f"{PROVIDER}: unexpected tool call (expected function.name)")
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


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else 0,
        output_tokens=completion if isinstance(completion, int) else 0,
    )

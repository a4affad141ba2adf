"""The Gemini API's wire format: normalised messages in, a normalised Reply out.

One turn is ``POST {base_url}/models/{model}:generateContent`` with the key in
``x-goog-api-key``. The system prompt travels as ``systemInstruction``; the conversation as
``contents`` of ``user``/``model`` turns made of ``parts``: ``text``, ``functionCall`` {name,
args} and ``functionResponse`` {name, response}. Tools are ``functionDeclarations`` with a JSON
Schema (``parametersJsonSchema``).

Function calls carry no id before Gemini 3, so ids are made here and a result finds its call's
name through them. Thinking models sign their parts (``thoughtSignature``) and must get those
parts back unchanged in later turns: the reply keeps them in ``provider_data["google"]`` and
they are sent verbatim while the same model goes on; a transcript from another model (after a
fallback) is rebuilt from its text and calls, with the signature Gemini documents for that case.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote

from llamaherd.api import (
    INVALID_ARGUMENTS,
    AuthError,
    Fatal,
    Message,
    ModelConfig,
    ProviderError,
    Reply,
    ToolCall,
    ToolSpec,
    Transient,
    Unavailable,
    Usage,
    http_timeout,
    post_json,
)

PROVIDER = "google"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# Gemini's documented stand-in for a call that carries no signature of this model.
SKIP_SIGNATURE = "skip_thought_signature_validator"
# A reply withheld for one of these reasons is not worth sending again as it is.
WITHHELD = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE", "OTHER"}

# thinkingLevel -> Gemini 2.5 thinkingBudget (tokens). 512 is the smallest budget every 2.5
# model accepts; Flash and Flash-Lite turn thinking off with 0, Pro cannot (its least is 128).
BUDGETS = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768}
FLASH_MAX_BUDGET = 24576
# thinkingLevel -> Gemini 3 thinkingLevel. Pro knows only low and high; Flash also minimal and
# medium.
PRO_LEVELS = {"off": "low", "minimal": "low", "low": "low", "medium": "high", "high": "high"}
FLASH_LEVELS = {"off": "minimal", "minimal": "minimal", "low": "low", "medium": "medium"}


def complete(messages: list[Message], tools: list[ToolSpec], model: ModelConfig) -> Reply:
    """One ``generateContent`` turn."""
    base_url = (model.base_url or DEFAULT_BASE_URL).rstrip("/")
    model_id = model.model.removeprefix("models/")
    data = post_json(
        PROVIDER,
        f"{base_url}/models/{quote(model_id, safe='-._')}:generateContent",
        {"content-type": "application/json", "x-goog-api-key": model.api_key or ""},
        request_body(messages, tools, model),
        timeout=http_timeout(model),
        secrets=[model.api_key, model.base_url],
        classify=classify,
    )
    return parse_reply(data, model_id)


def classify(status: int, body: str) -> type[ProviderError] | None:
    """Gemini's own meaning of an error reply, where its status code alone misleads."""
    if status == 400 and ("API_KEY_INVALID" in body or "API key not valid" in body):
        return AuthError  # a bad key is a 400 INVALID_ARGUMENT here
    if status == 400 and "FAILED_PRECONDITION" in body:
        return Unavailable  # billing not enabled, or the free tier not offered in this region
    if status == 429 and "PerDay" in body:
        return Unavailable  # a daily quota: waiting a minute will not refill it
    return None


# --------------------------------------------------------------------------- request


def request_body(
    messages: list[Message], tools: list[ToolSpec], model: ModelConfig
) -> dict[str, Any]:
    """The JSON body of one generateContent request."""
    system, contents = convert_messages(messages, model.model.removeprefix("models/"))
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if tools:
        body["tools"] = [
            {
                "functionDeclarations": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "parametersJsonSchema": t.parameters,
                    }
                    for t in tools
                ]
            }
        ]
    config: dict[str, Any] = {}
    if model.max_tokens:
        config["maxOutputTokens"] = model.max_tokens
    if model.temperature is not None:
        config["temperature"] = model.temperature
    thinking = thinking_config(model)
    if thinking:
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    return body


def thinking_config(model: ModelConfig) -> dict[str, Any]:
    """``thinkingConfig`` for ``thinkingLevel`` (or ``thinking_budget``): a level on Gemini 3,
    a token budget on 2.5; nothing for models that do not think or when neither is set."""
    model_id = model.model.lower()
    budget = model.extra.get("thinking_budget")
    if budget is not None:
        return {"thinkingBudget": budget}
    level = model.thinking_level
    if not level:
        return {}
    if "gemini-3" in model_id:
        levels = PRO_LEVELS if "pro" in model_id else FLASH_LEVELS
        return {"thinkingLevel": levels.get(level, "high")}
    if "gemini-2.5" in model_id:
        pro = "pro" in model_id
        if level == "off":
            return {"thinkingBudget": 128 if pro else 0}
        budget = BUDGETS[level]
        return {"thinkingBudget": budget if pro else min(budget, FLASH_MAX_BUDGET)}
    return {}


def convert_messages(messages: list[Message], model_id: str) -> tuple[str, list[dict[str, Any]]]:
    """(system text, contents). Consecutive turns of one role share a content."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    calls: dict[str, tuple[str, str | None]] = {}  # tool_call_id -> (name, Gemini's own id)
    for message in messages:
        if message.role == "system":
            system.append(message.content)
        elif message.role == "user":
            if message.content:
                _add(contents, "user", [{"text": message.content}])
        elif message.role == "assistant":
            _add(contents, "model", _model_parts(message, model_id, calls))
        elif message.role == "tool":
            _add(contents, "user", [_function_response(message, calls)])
        else:
            raise Fatal(f"{PROVIDER}: cannot send a message with role {message.role!r}")
    return "\n\n".join(part for part in system if part), contents


def _add(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _model_parts(
    message: Message, model_id: str, calls: dict[str, tuple[str, str | None]]
) -> list[dict[str, Any]]:
    """The parts of an assistant turn: this model's own parts when it made the turn (their
    signatures intact), else rebuilt from the text and the calls."""
    kept = (message.provider_data or {}).get(PROVIDER, {})
    if kept.get("model") == model_id and isinstance(kept.get("parts"), list):
        parts = kept["parts"]
        own_ids = kept.get("ids", [])
        for call, own in zip(message.tool_calls, own_ids, strict=False):
            calls[call.id] = (call.name, own)
        return [dict(part) for part in parts]
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"text": message.content})
    for call in message.tool_calls:
        calls[call.id] = (call.name, None)
        part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.arguments}}
        if "gemini-3" in model_id.lower():
            part["thoughtSignature"] = SKIP_SIGNATURE
        parts.append(part)
    return parts


def _function_response(
    message: Message, calls: dict[str, tuple[str, str | None]]
) -> dict[str, Any]:
    if message.tool_call_id not in calls:
        raise Fatal(f"{PROVIDER}: a tool result answers no earlier function call")
    name, own_id = calls[message.tool_call_id]
    key = "error" if message.is_error else "output"
    response: dict[str, Any] = {"name": name, "response": {key: message.content}}
    if own_id:
        response["id"] = own_id
    return {"functionResponse": response}


# --------------------------------------------------------------------------- reply


def parse_reply(data: dict[str, Any], model_id: str) -> Reply:
    """A Reply from a generateContent response; any other shape is Fatal."""
    candidates = data.get("candidates")
    if not candidates:
        feedback = data.get("promptFeedback")
        reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
        if reason:
            raise Fatal(f"{PROVIDER}: the prompt was blocked ({reason})")
        raise Fatal(f"{PROVIDER}: unexpected reply (expected candidates)")
    candidate = candidates[0] if isinstance(candidates, list) else None
    if not isinstance(candidate, dict):
        raise Fatal(f"{PROVIDER}: unexpected reply (expected candidates[0] to be an object)")
    finish = candidate.get("finishReason")
    content = candidate.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    parts = parts or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise Fatal(f"{PROVIDER}: unexpected reply (content.parts must be a list of objects)")
    if not parts:
        _no_content(finish)
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
    calls = [_tool_call(p["functionCall"]) for p in parts if "functionCall" in p]
    reply = Reply(
        text="".join(texts),
        tool_calls=calls,
        usage=_usage(data.get("usageMetadata")),
        stop_reason=finish,
    )
    if any("thoughtSignature" in p or p.get("thought") for p in parts):
        ids = [(p["functionCall"].get("id") or None) for p in parts if "functionCall" in p]
        reply.provider_data = {PROVIDER: {"model": model_id, "parts": parts, "ids": ids}}
    return reply


def _no_content(finish: Any) -> None:
    """A candidate without parts: retried, refused or (MAX_TOKENS, STOP) an empty turn."""
    if finish == "MALFORMED_FUNCTION_CALL":
        # The model wrote a call that does not parse; asking again usually gets a good one.
        raise Transient(f"{PROVIDER}: the model produced a malformed function call")
    if finish in WITHHELD:
        raise Fatal(f"{PROVIDER}: the reply was withheld (finishReason {finish})")


def _tool_call(raw: Any) -> ToolCall:
    name = raw.get("name") if isinstance(raw, dict) else None
    if not isinstance(name, str) or not name:
        raise Fatal(f"{PROVIDER}: unexpected functionCall (expected a name)")
    args = raw.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        args = {INVALID_ARGUMENTS: f"args must be a JSON object, not {type(args).__name__}"}
    call_id = raw.get("id") or f"call_{uuid.uuid4().hex[:16]}"
    return ToolCall(id=str(call_id), name=name, arguments=args)


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()

    def count(key: str) -> int:  # as reported: core refuses a count that cannot be right
        value = usage.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else 0

    prompt = count("promptTokenCount") + count("toolUsePromptTokenCount")
    return Usage(
        input_tokens=prompt,
        # Thinking is billed as output.
        output_tokens=count("candidatesTokenCount") + count("thoughtsTokenCount"),
        cached_input_tokens=min(count("cachedContentTokenCount"), prompt),
    )

"""The openai provider against a Chat Completions server on 127.0.0.1: what is particular to
it (the shared provider scenarios run for every service of the plugin in test_presets.py)."""

from __future__ import annotations

import json

import pytest

from llamaherd.api import (
    INVALID_ARGUMENTS,
    Fatal,
    Message,
    ModelConfig,
    RateLimited,
    ToolSpec,
    Unavailable,
)
from llamaherd.plugins import registry

KEY = "sk-test-SECRET"
PROMPT = "the secret plan is pineapple"
BASH = ToolSpec(
    "bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}},
)


def provider():
    return registry().providers["openai"]


def model(server, **kw) -> ModelConfig:
    kw.setdefault("api_key", KEY)
    return ModelConfig(
        name="gpt", provider="openai", model="gpt-x", base_url=server.url + "/v1", **kw
    )


def completion(content=None, tool_calls=None, finish="stop"):
    message = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-x",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47},
    }


def call(cid, name, arguments):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def error_body(code, message):
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


def test_registers_provider_and_unstaged_key_type():
    key_type = registry().credential_types["openai_key"]
    assert provider().credential_type == "openai_key" and provider().key_required is False
    assert key_type.sandbox is False and [f.name for f in key_type.fields] == ["token"]


def test_tool_call_round_trip(model_server):
    model_server.reply(
        200, completion(None, [call("c1", "bash", '{"command": "ls"}')], "tool_calls")
    )
    model_server.reply(200, completion("Done."))
    messages = [Message("system", "You are an agent."), Message("user", "Do it.")]
    cfg = model(model_server, max_tokens=500, temperature=0.1)
    reply = provider().complete(messages, [BASH], cfg, {})
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("c1", "bash", {"command": "ls"})
    ]
    assert reply.stop_reason == "tool_calls" and reply.text == ""
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (40, 7)

    first = model_server.requests[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["authorization"] == f"Bearer {KEY}"
    assert first["body"] == {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Do it."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": "Run a shell command.",
                    "parameters": BASH.parameters,
                },
            }
        ],
        "max_tokens": 500,
        "temperature": 0.1,
    }

    messages += [
        Message("assistant", "", tool_calls=reply.tool_calls),
        Message("tool", "a b", tool_call_id="c1"),
        Message("tool", "boom", tool_call_id="c1", is_error=True),
    ]
    assert provider().complete(messages, [BASH], cfg, {}).text == "Done."
    wire = model_server.requests[1]["body"]["messages"]
    assert wire[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": "a b"}
    assert wire[4] == {"role": "tool", "tool_call_id": "c1", "content": "ERROR: boom"}


def test_no_key_sends_no_authorization(model_server):
    model_server.reply(200, completion("hi"))
    provider().complete([Message("user", "x")], [], model(model_server, api_key=None), {})
    assert "authorization" not in model_server.requests[0]["headers"]


def test_official_api_uses_max_completion_tokens_and_reasoning_effort():
    from llamaherd_openai.chat import request_body

    cfg = ModelConfig(
        name="o", provider="openai", model="o4", max_tokens=99, thinking_level="xhigh"
    )
    body = request_body([Message("user", "x")], [], cfg, provider().preset)
    assert body["max_completion_tokens"] == 99 and "max_tokens" not in body
    assert body["reasoning_effort"] == "high"


def test_extra_headers(model_server):
    model_server.reply(200, completion("hi"))
    cfg = model(model_server, extra={"headers": {"HTTP-Referer": "https://example.org"}})
    provider().complete([Message("user", "x")], [], cfg, {})
    assert model_server.requests[0]["headers"]["http-referer"] == "https://example.org"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"command": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("", None),
        ({"command": "ls"}, None),
    ],
)
def test_tool_arguments_shapes(model_server, arguments, expected):
    model_server.reply(200, completion(None, [call("c1", "bash", arguments)], "tool_calls"))
    reply = provider().complete([Message("user", "x")], [BASH], model(model_server), {})
    args = reply.tool_calls[0].arguments
    if expected:
        assert list(args) == [INVALID_ARGUMENTS] and expected in args[INVALID_ARGUMENTS]
    else:
        assert args == (arguments or {})


def test_error_object_in_a_200_reply(model_server):
    model_server.reply(200, {"error": {"code": 429, "message": "upstream rate limited"}})
    with pytest.raises(RateLimited):
        provider().complete([Message("user", "x")], [], model(model_server), {})


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"<html>proxy</html>", "reply is not JSON"),
        (200, [1, 2], "not a JSON object"),
        (200, {"choices": []}, "unexpected reply"),
        (200, {"choices": [{"message": {"content": 5}}]}, "unexpected reply"),
        (
            200,
            {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]},
            "unexpected tool call",
        ),
        (400, error_body("bad", "bad request"), "HTTP 400"),
    ],
)
def test_malformed_or_unexpected_replies_are_fatal(model_server, status, body, expected):
    model_server.reply(status, body)
    with pytest.raises(Fatal, match=rf"^openai: .*{expected}"):
        provider().complete([Message("user", "x")], [], model(model_server), {})


def test_nothing_secret_in_errors_or_events(model_server, chain_env):
    url = model_server.url
    chain = chain_env.make(
        f'[models.gpt]\nprovider = "openai"\nmodel = "gpt-x"\nbase_url = "{url}/v1"\n',
        ["gpt"],
        {("openai_key", "default"): {"token": KEY}},
    )
    model_server.reply(502, error_body("bad_gateway", f"{url}/v1 with {KEY} failed"))
    model_server.reply(422, error_body("bad", f"{url}/v1 with {KEY} failed"))
    with pytest.raises(Fatal) as err:
        chain.complete([Message("user", PROMPT)], [], {})
    shown = str(err.value) + json.dumps(chain_env.events)
    assert "failed" in shown
    assert KEY not in shown and url not in shown and PROMPT not in shown


def test_model_not_found_is_unavailable(model_server):
    model_server.reply(404, {"error": "model 'llama9' not found"})
    with pytest.raises(Unavailable, match="not found"):
        provider().complete([Message("user", "x")], [], model(model_server), {})

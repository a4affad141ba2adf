"""The anthropic provider against a Messages API server on 127.0.0.1: the shared provider
scenarios (llamaherd.provider_contract) through the Messages API's wire, then its particulars."""

from __future__ import annotations

import json
import socket

import pytest

from llamaherd.api import (
    Fatal,
    Message,
    ModelConfig,
    RateLimited,
    ToolCall,
    ToolSpec,
    Transient,
    Unavailable,
)
from llamaherd.plugins import registry
from llamaherd.provider_contract import KEY, PROMPT, SCENARIOS, Reply, Wire

BASH = ToolSpec(
    "bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}},
)


def provider():
    return registry().providers["anthropic"]


def model(server, **kw) -> ModelConfig:
    return ModelConfig(
        name="sonnet",
        provider="anthropic",
        model="claude-x",
        api_key=KEY,
        base_url=server.url,
        **kw,
    )


def tool_use_reply(calls, text=""):
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 50},
    }


def text_reply(text):
    return {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }


def error_body(kind, message):
    return {"type": "error", "error": {"type": kind, "message": message}}


def test_registers_provider_and_unstaged_key_type():
    reg = registry()
    assert provider().credential_type == "anthropic_key"
    key_type = reg.credential_types["anthropic_key"]
    assert key_type.sandbox is False and [f.name for f in key_type.fields] == ["token"]
    assert key_type.fields[0].secret and key_type.env({"token": KEY}, None) == {}


def test_tool_call_round_trip(model_server):
    model_server.reply(
        200,
        tool_use_reply(
            [("tu_1", "bash", {"command": "ls"}), ("tu_2", "bash", {"command": "pwd"})], "Looking."
        ),
    )
    model_server.reply(200, text_reply("All done."))
    messages = [Message("system", "You are an agent."), Message("user", "Do it.")]
    reply = provider().complete(messages, [BASH], model(model_server), {})
    assert reply.text == "Looking." and reply.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("tu_1", "bash", {"command": "ls"}),
        ("tu_2", "bash", {"command": "pwd"}),
    ]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (150, 20)

    first = model_server.requests[0]
    assert first["path"] == "/v1/messages"
    assert first["headers"]["x-api-key"] == KEY
    assert first["headers"]["anthropic-version"] == "2023-06-01"
    assert first["headers"]["content-type"] == "application/json"
    body = first["body"]
    assert body["model"] == "claude-x" and body["max_tokens"] == 8192
    assert body["system"] == [
        {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["tools"] == [
        {"name": "bash", "description": "Run a shell command.", "input_schema": BASH.parameters}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Do it.", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert "thinking" not in body and "temperature" not in body

    messages += [
        Message("assistant", reply.text, tool_calls=reply.tool_calls),
        Message("tool", "a b", tool_call_id="tu_1"),
        Message("tool", "no such dir", tool_call_id="tu_2", is_error=True),
    ]
    final = provider().complete(messages, [BASH], model(model_server), {})
    assert final.text == "All done." and final.tool_calls == []
    wire = model_server.requests[1]["body"]["messages"]
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"command": "ls"}},
            {"type": "tool_use", "id": "tu_2", "name": "bash", "input": {"command": "pwd"}},
        ],
    }
    # Consecutive tool results travel in one user message.
    assert wire[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "a b"},
            {
                "type": "tool_result",
                "tool_use_id": "tu_2",
                "content": "no such dir",
                "is_error": True,
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
    assert len(wire) == 3


def test_thinking_budget_and_temperature(model_server):
    model_server.reply(200, text_reply("hm"))
    model_server.reply(200, text_reply("hm"))
    cfg = model(model_server, thinking_level="medium", temperature=0.2, max_tokens=1000)
    provider().complete([Message("user", "x")], [], cfg, {})
    body = model_server.requests[0]["body"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 10000}
    assert body["max_tokens"] > 10000 and "temperature" not in body
    # A tool-use turn whose thinking blocks were not kept is sent without thinking.
    history = [
        Message("user", "x"),
        Message("assistant", "", [ToolCall("t", "bash", {})]),
        Message("tool", "out", tool_call_id="t"),
    ]
    provider().complete(history, [BASH], cfg, {})
    body = model_server.requests[1]["body"]
    assert "thinking" not in body and body["temperature"] == 0.2


def test_thinking_blocks_round_trip(model_server):
    block = {"type": "thinking", "thinking": "plan", "signature": "sig"}
    reply_body = tool_use_reply([("t", "bash", {"command": "ls"})])
    reply_body["content"].insert(0, block)
    model_server.reply(200, reply_body)
    model_server.reply(200, text_reply("ok"))
    cfg = model(model_server, thinking_level="low")
    reply = provider().complete([Message("user", "x")], [BASH], cfg, {})
    assistant = Message("assistant", "", reply.tool_calls)
    assistant.provider_data = reply.provider_data  # what the session keeps in the transcript
    provider().complete(
        [Message("user", "x"), assistant, Message("tool", "o", tool_call_id="t")], [BASH], cfg, {}
    )
    body = model_server.requests[1]["body"]
    assert body["thinking"]["budget_tokens"] == 4096
    assert body["messages"][1]["content"][0] == block


def test_oauth_token_uses_bearer(model_server):
    model_server.reply(200, text_reply("hi"))
    provider().complete(
        [Message("user", "x")], [], model(model_server, auth_type="oauth_token"), {}
    )
    headers = model_server.requests[0]["headers"]
    assert headers["authorization"] == f"Bearer {KEY}" and "x-api-key" not in headers


@pytest.mark.parametrize("status", [500, 529])
def test_server_errors_are_transient(model_server, status):
    model_server.reply(status, error_body("overloaded_error", "Overloaded"))
    with pytest.raises(Transient, match=rf"anthropic: HTTP {status}"):
        provider().complete([Message("user", "x")], [], model(model_server), {})


def test_rate_limit_carries_retry_after(model_server):
    model_server.reply(429, error_body("rate_limit_error", "x"), {"retry-after": "12"})
    with pytest.raises(RateLimited) as err:
        provider().complete([Message("user", "x")], [], model(model_server), {})
    assert err.value.retry_after == 12.0


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, b"{not json", "reply is not JSON"),
        (200, {"unexpected": True}, "unexpected reply"),
        (
            200,
            {"type": "message", "content": [{"type": "tool_use", "id": "x"}]},
            "unexpected tool_use",
        ),
        (200, {"type": "message", "content": [{"type": "image"}]}, "unexpected content block"),
        (400, error_body("invalid_request_error", "messages: bad"), "HTTP 400"),
    ],
)
def test_malformed_or_unexpected_replies_are_fatal(model_server, status, body, expected):
    model_server.reply(status, body)
    with pytest.raises(Fatal, match=rf"^anthropic: .*{expected}"):
        provider().complete([Message("user", "x")], [], model(model_server), {})


def test_connection_refused_and_timeout_are_transient(model_server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = ModelConfig(
        name="m", provider="anthropic", model="c", api_key=KEY, base_url=f"http://127.0.0.1:{port}"
    )
    with pytest.raises(Transient, match="^anthropic: connection failed$"):
        provider().complete([Message("user", "x")], [], closed, {})
    model_server.reply(200, text_reply("late"), delay=0.5)
    slow = model(model_server, extra={"timeout": 0.1})
    with pytest.raises(Transient, match="^anthropic: request timed out$"):
        provider().complete([Message("user", "x")], [], slow, {})


def test_nothing_secret_in_errors_or_events(model_server, chain_env):
    url = model_server.url
    chain = chain_env.make(
        f'[models.sonnet]\nprovider = "anthropic"\nmodel = "claude-x"\nbase_url = "{url}"\n',
        ["sonnet"],
        {("anthropic_key", "default"): {"token": KEY}},
    )
    echo = f"key {KEY} at {url} is wrong"
    model_server.reply(503, error_body("api_error", echo))
    model_server.reply(400, error_body("invalid_request_error", echo))
    with pytest.raises(Fatal) as err:
        chain.complete([Message("user", PROMPT)], [], {})
    # The server's own text is passed on, scrubbed of key and URL; the prompt is never quoted.
    shown = str(err.value) + json.dumps(chain_env.events)
    assert "is wrong" in shown
    assert KEY not in shown and url not in shown and PROMPT not in shown


def test_unknown_model_is_unavailable(model_server):
    model_server.reply(404, error_body("not_found_error", "model: claude-x"))
    with pytest.raises(Unavailable):
        provider().complete([Message("user", "x")], [], model(model_server), {})


class MessagesWire(Wire):
    """Anthropic's Messages API as the shared scenarios see it."""

    provider = "anthropic"
    credential_type = "anthropic_key"
    path = ""  # the provider adds /v1/messages

    def text(self, text: str, input_tokens: int = 10, output_tokens: int = 5) -> Reply:
        body = text_reply(text)
        body["usage"] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        return (200, body, {})

    def tool_calls(self, calls: list[tuple[str, dict]]) -> Reply:
        return (200, tool_use_reply([(f"tu_{i}", n, a) for i, (n, a) in enumerate(calls)]), {})

    def rate_limited(self, seconds: float) -> Reply:
        return (429, error_body("rate_limit_error", "slow down"), {"retry-after": f"{seconds:g}"})

    def unauthorized(self) -> Reply:
        return (401, error_body("authentication_error", f"invalid x-api-key {KEY}"), {})

    def server_error(self) -> Reply:
        return (529, error_body("overloaded_error", "Overloaded"), {})

    def unavailable(self) -> Reply:
        return (400, error_body("invalid_request_error", "Your credit balance is too low"), {})

    def sent_key(self, request: dict) -> str | None:
        return request["headers"].get("x-api-key")

    def sent_model(self, request: dict) -> str:
        return request["body"]["model"]

    def _blocks(self, request: dict, role: str, kind: str) -> list[dict]:
        return [
            block
            for message in request["body"]["messages"]
            if message["role"] == role and isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == kind
        ]

    def sent_calls(self, request: dict) -> list[tuple[str, dict]]:
        return [(b["name"], b["input"]) for b in self._blocks(request, "assistant", "tool_use")]

    def sent_results(self, request: dict) -> list[tuple[str, bool]]:
        results = self._blocks(request, "user", "tool_result")
        return [(b["content"], bool(b.get("is_error"))) for b in results]

    def sent_tools(self, request: dict) -> list[str]:
        return [tool["name"] for tool in request["body"].get("tools", [])]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_contract(scenario, model_server, chain_env):
    scenario(MessagesWire(), model_server, chain_env)

"""The services of llamaherd-openai (openai, groq, mistral, openrouter, xai, custom) over real HTTP:
the shared provider scenarios through each one's wire adapter, then what is particular to each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamaherd.provider_contract import KEY, SCENARIOS, Reply, Wire


def error_body(code: Any, message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


class ChatWire(Wire):
    """OpenAI's Chat Completions; subclasses say how each service differs in its errors."""

    def __init__(self, provider: str, credential_type: str):
        self.provider = provider
        self.credential_type = credential_type

    # replies ------------------------------------------------------------------------------

    def completion(self, message: dict[str, Any], finish: str, usage: dict[str, Any]) -> Reply:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "served-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        return (200, body, {})

    def text(self, text: str, input_tokens: int = 10, output_tokens: int = 5) -> Reply:
        usage = {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }
        return self.completion({"role": "assistant", "content": text}, "stop", usage)

    def tool_calls(self, calls: list[tuple[str, dict[str, Any]]]) -> Reply:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call{i}abcd"[:9],
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(calls)
            ],
        }
        usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
        return self.completion(message, "tool_calls", usage)

    def rate_limited(self, seconds: float) -> Reply:
        body = error_body("rate_limit_exceeded", "Rate limit reached", "tokens")
        return (429, body, {"retry-after": f"{seconds:g}"})

    def unauthorized(self) -> Reply:
        return (401, error_body("invalid_api_key", f"Incorrect API key provided: {KEY}"), {})

    def server_error(self) -> Reply:
        return (503, error_body(None, "The server is overloaded", "server_error"), {})

    def unavailable(self) -> Reply:
        return (404, error_body("model_not_found", "The model does not exist"), {})

    # requests -----------------------------------------------------------------------------

    def sent_key(self, request: dict[str, Any]) -> str | None:
        auth = request["headers"].get("authorization")
        return auth.removeprefix("Bearer ") if auth else None

    def sent_model(self, request: dict[str, Any]) -> str:
        return request["body"]["model"]

    def sent_calls(self, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [
            (call["function"]["name"], json.loads(call["function"]["arguments"]))
            for message in request["body"]["messages"]
            for call in message.get("tool_calls") or []
        ]

    def sent_results(self, request: dict[str, Any]) -> list[tuple[str, bool]]:
        return [
            (m["content"].removeprefix("ERROR: "), m["content"].startswith("ERROR: "))
            for m in request["body"]["messages"]
            if m["role"] == "tool"
        ]

    def sent_tools(self, request: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] for t in request["body"].get("tools", [])]


class OpenAIWire(ChatWire):
    def unavailable(self) -> Reply:
        body = error_body(
            "insufficient_quota", "You exceeded your current quota", "insufficient_quota"
        )
        return (429, body, {})


class GroqWire(ChatWire):
    def unavailable(self) -> Reply:
        body = error_body(
            "rate_limit_exceeded",
            "Request too large for model on tokens per minute (TPM): Limit 6000, Requested 9000",
            "tokens",
        )
        return (413, body, {})


class OpenRouterWire(ChatWire):
    def unauthorized(self) -> Reply:
        return (401, {"error": {"code": 401, "message": f"No auth credentials found {KEY}"}}, {})

    def unavailable(self) -> Reply:
        message = "Insufficient credits. Add more using https://openrouter.ai/settings/credits"
        return (402, {"error": {"code": 402, "message": message}}, {})

    def server_error(self) -> Reply:
        return (502, {"error": {"code": 502, "message": "Provider returned error"}}, {})


class XAIWire(ChatWire):
    def unauthorized(self) -> Reply:
        # xAI refuses a bad key with a 400, not a 401.
        body = {
            "code": "Client specified an invalid argument",
            "error": f"Incorrect API key provided: {KEY[:2]}***{KEY[-2:]}. You can obtain an "
            "API key from https://console.x.ai.",
        }
        return (400, body, {})

    def unavailable(self) -> Reply:
        body = {
            "code": "The caller does not have permission to execute the specified operation",
            "error": "Your newly created team doesn't have any credits yet.",
        }
        return (403, body, {})


class MistralWire(ChatWire):
    def unauthorized(self) -> Reply:
        return (401, {"message": "Unauthorized", "request_id": "r1"}, {})

    def rate_limited(self, seconds: float) -> Reply:
        body = {
            "object": "error",
            "message": "Requests rate limit exceeded",
            "type": "rate_limited",
        }
        return (429, body, {"retry-after": f"{seconds:g}"})


WIRES = [
    OpenAIWire("openai", "openai_key"),
    GroqWire("groq", "groq_key"),
    MistralWire("mistral", "mistral_key"),
    OpenRouterWire("openrouter", "openrouter_key"),
    XAIWire("xai", "xai_key"),
    OpenAIWire("custom", "custom_key"),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
@pytest.mark.parametrize("wire", WIRES, ids=str)
def test_contract(wire, scenario, model_server, chain_env):
    scenario(wire, model_server, chain_env)


# ---------------------------------------------------------------------- what differs per service

SERVICES = {
    "openai": ("openai_key", "OPENAI_API_KEY", "https://api.openai.com/v1"),
    "groq": ("groq_key", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
    "mistral": ("mistral_key", "MISTRAL_API_KEY", "https://api.mistral.ai/v1"),
    "openrouter": ("openrouter_key", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
    "xai": ("xai_key", "XAI_API_KEY", "https://api.x.ai/v1"),
    "custom": ("custom_key", "CUSTOM_API_KEY", None),
}


def provider(name: str):
    from llamaherd.plugins import registry

    return registry().providers[name]


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_each_service_is_registered_by_this_plugin_with_its_key_type(name):
    from llamaherd.plugins import registry

    credential_type, env, base_url = SERVICES[name]
    reg = registry()
    served = reg.providers[name]
    assert reg.owner[("providers", name)] == "openai"
    assert reg.owner[("credential_types", credential_type)] == "openai"
    assert (served.credential_type, served.key_env, served.preset.base_url) == (
        credential_type,
        env,
        base_url,
    )
    key_type = reg.credential_types[credential_type]
    assert key_type.sandbox is False and [f.name for f in key_type.fields] == ["token"]


def _body(name: str, model_id: str, **config):
    from llamaherd_openai.chat import request_body

    from llamaherd.api import Message, ModelConfig

    cfg = ModelConfig(name="m", provider=name, model=model_id, **config)
    return request_body([Message("user", "x")], [], cfg, provider(name).preset)


@pytest.mark.parametrize(
    ("name", "model_id", "level", "expected"),
    [
        ("openai", "o4-mini", "xhigh", {"reasoning_effort": "high"}),
        ("openai", "o4-mini", "off", {}),
        ("groq", "openai/gpt-oss-120b", "minimal", {"reasoning_effort": "low"}),
        ("groq", "openai/gpt-oss-120b", "off", {}),
        ("groq", "qwen/qwen3-32b", "high", {"reasoning_effort": "default"}),
        ("groq", "qwen/qwen3-32b", "off", {"reasoning_effort": "none"}),
        ("mistral", "mistral-small-latest", "low", {"reasoning_effort": "high"}),
        ("mistral", "mistral-small-latest", "off", {"reasoning_effort": "none"}),
        ("openrouter", "anthropic/claude-sonnet-4.5", "xhigh", {"reasoning": {"effort": "xhigh"}}),
        ("openrouter", "openai/gpt-5", "off", {"reasoning": {"effort": "none"}}),
        ("xai", "grok-3-mini", "minimal", {"reasoning_effort": "low"}),
        ("xai", "grok-4.3", "off", {"reasoning_effort": "none"}),
        ("custom", "llama3", "medium", {"reasoning_effort": "medium"}),
    ],
)
def test_thinking_level_is_each_services_reasoning_setting(name, model_id, level, expected):
    body = _body(name, model_id, thinking_level=level)
    sent = {k: body[k] for k in ("reasoning_effort", "reasoning") if k in body}
    assert sent == expected


@pytest.mark.parametrize(
    ("name", "base_url", "key"),
    [
        ("openai", None, "max_completion_tokens"),
        ("openai", "http://127.0.0.1:1/v1", "max_tokens"),
        ("groq", None, "max_completion_tokens"),
        ("mistral", None, "max_tokens"),
        ("openrouter", None, "max_tokens"),
        ("xai", None, "max_tokens"),
    ],
)
def test_max_tokens_spelling(name, base_url, key):
    body = _body(name, "m", max_tokens=77, base_url=base_url)
    assert body[key] == 77


def test_no_thinking_level_sends_no_reasoning_setting():
    for name in SERVICES:
        body = _body(name, "m")
        assert "reasoning_effort" not in body and "reasoning" not in body


def test_mistral_gets_tool_call_ids_it_accepts(model_server):
    from llamaherd.api import Message, ModelConfig, ToolCall

    model_server.reply(*MistralWire("mistral", "mistral_key").text("ok")[:2])
    foreign = ToolCall("toolu_01A09q90qw90lq917835lq9", "bash", {"command": "ls"})
    native = ToolCall("D681PevKs", "bash", {"command": "pwd"})
    messages = [
        Message("user", "x"),
        Message("assistant", "", [foreign, native]),
        Message("tool", "a", tool_call_id=foreign.id),
        Message("tool", "b", tool_call_id=native.id),
    ]
    cfg = ModelConfig("m", "mistral", "mistral-large-latest", base_url=model_server.url + "/v1")
    provider("mistral").complete(messages, [], cfg, {})
    wire = model_server.requests[0]["body"]["messages"]
    sent = [call["id"] for call in wire[1]["tool_calls"]]
    assert sent[1] == "D681PevKs"
    assert len(sent[0]) == 9 and sent[0].isalnum() and sent[0] != sent[1]
    assert [wire[2]["tool_call_id"], wire[3]["tool_call_id"]] == sent


def test_openrouter_reports_the_cost_and_a_configured_price_wins(model_server, chain_env):
    wire = OpenRouterWire("openrouter", "openrouter_key")
    status, body, _ = wire.text("hi", 1000, 100)
    body["usage"]["cost"] = 0.0123
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 600}
    model_server.reply(status, body)
    chain = wire.chain(model_server, chain_env)
    reply = chain.complete([_user()], [], {})
    assert reply.usage.cost_usd == 0.0123 and reply.usage.cached_input_tokens == 600
    assert model_server.requests[0]["body"]["usage"] == {"include": True}

    chain_env.events.clear()
    model_server.reply(status, body)
    priced = wire.chain(model_server, chain_env, extra="pricing = { input = 1.0, output = 1.0 }\n")
    assert priced.complete([_user()], [], {}).usage.cost_usd == pytest.approx(1100 / 1e6)


def test_openrouter_error_inside_a_200_reply_is_classified(model_server, chain_env):
    from llamaherd.api import Unavailable

    model_server.reply(200, {"error": {"code": 402, "message": "Insufficient credits"}})
    cfg = _config("openrouter", model_server)
    with pytest.raises(Unavailable, match="Insufficient credits"):
        provider("openrouter").complete([_user()], [], cfg, {})


def test_groq_flex_capacity_is_retried(model_server):
    from llamaherd.api import Transient, Unavailable

    model_server.reply(498, error_body("capacity_exceeded", "Flex tier capacity exceeded"))
    with pytest.raises(Transient) as err:
        provider("groq").complete([_user()], [], _config("groq", model_server), {})
    assert not isinstance(err.value, Unavailable)


def test_reasoning_tokens_outside_completion_tokens_count_as_output(model_server):
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 315,
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    model_server.reply(*XAIWire("xai", "xai_key").completion({"content": "hi"}, "stop", usage)[:2])
    reply = provider("xai").complete([_user()], [], _config("xai", model_server), {})
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (10, 305)


def test_cached_prompt_tokens_are_priced_at_the_cached_rate(model_server, chain_env):
    wire = OpenAIWire("openai", "openai_key")
    status, body, _ = wire.text("hi", 10_000, 1_000)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 8_000}
    model_server.reply(status, body)
    config = wire.table("gpt", model_server.url, "gpt-4o-2024-08-06")
    chain = chain_env.make(config, ["gpt"], {("openai_key", "default"): {"token": KEY}})
    # gpt-4o: 2.50 in, 1.25 cached in, 10.00 out per million.
    expected = (2_000 * 2.5 + 8_000 * 1.25 + 1_000 * 10.0) / 1e6
    assert chain.complete([_user()], [], {}).usage.cost_usd == pytest.approx(expected)
    ((event,),) = [[d for k, d in chain_env.events if k == "model_call"]]
    assert event["cached_input_tokens"] == 8_000 and event["cost_usd"] == pytest.approx(expected)


def test_an_unknown_model_has_no_cost(model_server, chain_env):
    wire = OpenAIWire("custom", "custom_key")
    model_server.reply(*wire.text("hi")[:2])
    reply = wire.chain(model_server, chain_env).complete([_user()], [], {})
    assert reply.usage.cost_usd is None
    assert [d["cost_usd"] for k, d in chain_env.events if k == "model_call"] == [None]


def test_custom_needs_a_base_url_and_takes_its_key_from_the_environment(
    tmp_project, al, model_server, chain_env, monkeypatch
):
    from llamaherd.api import ConfigError

    tmp_project.config('[models.mine]\nprovider = "custom"\nmodel = "llama3"\n')
    tmp_project.add_agent("bot", 'models = ["mine"]\n[runtime]\ntype = "host-user"\n')
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode != 0
    assert 'config.toml: models.mine: provider = "custom" needs base_url' in result.stdout
    with pytest.raises(ConfigError, match="needs base_url"):
        chain_env.make('[models.mine]\nprovider = "custom"\nmodel = "llama3"\n', ["mine"], {})

    monkeypatch.setenv("CUSTOM_API_KEY", "sk-from-env")
    model_server.reply(*OpenAIWire("custom", "custom_key").text("hi")[:2])
    config = (
        f'[models.mine]\nprovider = "custom"\nmodel = "llama3"\nbaseUrl = "{model_server.url}/v1"\n'
    )
    chain = chain_env.make(config, ["mine"], {})
    assert chain.complete([_user()], [], {}).text == "hi"
    assert model_server.requests[0]["headers"]["authorization"] == "Bearer sk-from-env"


def test_a_missing_service_key_says_how_to_add_it(chain_env, monkeypatch):
    from llamaherd.api import AuthError

    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    config = '[models.g]\nprovider = "groq"\nmodel = "llama-3.3-70b-versatile"\n'
    with pytest.raises(AuthError, match="al creds add groq_key"):
        chain_env.make(config, ["g"], {})


def test_prices_match_snapshots_but_not_other_models():
    from llamaherd.pricing import price_for

    prices = provider("openai").prices
    assert price_for(prices, "gpt-4o-2024-11-20") == prices["gpt-4o"]
    assert price_for(prices, "gpt-4o-2024-05-13") == prices["gpt-4o-2024-05-13"]  # its own price
    assert price_for(prices, "gpt-4o-mini-2024-07-18") == prices["gpt-4o-mini"]
    assert price_for(prices, "gpt-4o-audio-preview") is None
    assert price_for(provider("custom").prices, "gpt-4o") is None
    for name in ("groq", "mistral", "openrouter", "xai"):
        assert provider(name).prices, name


def _user():
    from llamaherd.api import Message

    return Message("user", "hi")


def _config(name: str, server):
    from llamaherd.api import ModelConfig

    return ModelConfig("m", name, "some-model", base_url=server.url + "/v1", api_key=KEY)

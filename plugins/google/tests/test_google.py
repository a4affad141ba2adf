"""The google provider against a Gemini API server on 127.0.0.1: the shared provider scenarios
through the Gemini wire adapter, then what is particular to Gemini."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamaherd.api import (
    AuthError,
    Fatal,
    Message,
    ModelConfig,
    ToolCall,
    ToolSpec,
    Transient,
    Unavailable,
)
from llamaherd.provider_contract import KEY, SCENARIOS, Reply, Wire

BASH = ToolSpec(
    "bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def gemini_error(code: int, status: str, message: str, *details: dict) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return {"error": error}


def quota_failure(quota_id: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": quota_id,
            }
        ],
    }


class GeminiWire(Wire):
    provider = "google"
    credential_type = "google_key"
    path = "/v1beta"

    def response(self, parts: list[dict], finish: str = "STOP", **usage: int) -> Reply:
        body = {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": usage.get("prompt", 10),
                "candidatesTokenCount": usage.get("candidates", 5),
                "totalTokenCount": usage.get("prompt", 10) + usage.get("candidates", 5),
                **{k: v for k, v in usage.items() if k not in ("prompt", "candidates")},
            },
            "modelVersion": "gemini-test",
            "responseId": "r-1",
        }
        return (200, body, {})

    def text(self, text: str, input_tokens: int = 10, output_tokens: int = 5) -> Reply:
        return self.response([{"text": text}], prompt=input_tokens, candidates=output_tokens)

    def tool_calls(self, calls: list[tuple[str, dict[str, Any]]]) -> Reply:
        return self.response([{"functionCall": {"name": n, "args": a}} for n, a in calls])

    def rate_limited(self, seconds: float) -> Reply:
        retry = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"}
        body = gemini_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details.",
            quota_failure("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
            retry,
        )
        return (429, body, {})

    def unauthorized(self) -> Reply:
        info = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        }
        body = gemini_error(
            400, "INVALID_ARGUMENT", f"API key not valid. Please pass a valid API key. {KEY}", info
        )
        return (400, body, {})

    def server_error(self) -> Reply:
        message = "The model is overloaded. Please try again later."
        return (503, gemini_error(503, "UNAVAILABLE", message), {})

    def unavailable(self) -> Reply:
        body = gemini_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota.",
            quota_failure("GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
        )
        return (429, body, {})

    def sent_key(self, request: dict[str, Any]) -> str | None:
        return request["headers"].get("x-goog-api-key")

    def sent_model(self, request: dict[str, Any]) -> str:
        prefix, _, rest = request["path"].partition("/models/")
        assert prefix == "/v1beta" and rest.endswith(":generateContent")
        return rest.removesuffix(":generateContent")

    def _parts(self, request: dict[str, Any], role: str) -> list[dict[str, Any]]:
        contents = request["body"]["contents"]
        return [p for c in contents if c["role"] == role for p in c["parts"]]

    def sent_calls(self, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        return [
            (p["functionCall"]["name"], p["functionCall"]["args"])
            for p in self._parts(request, "model")
            if "functionCall" in p
        ]

    def sent_results(self, request: dict[str, Any]) -> list[tuple[str, bool]]:
        results = []
        for part in self._parts(request, "user"):
            if "functionResponse" in part:
                response = part["functionResponse"]["response"]
                results.append((response.get("output", response.get("error")), "error" in response))
        return results

    def sent_tools(self, request: dict[str, Any]) -> list[str]:
        tools = request["body"].get("tools", [])
        return [d["name"] for t in tools for d in t["functionDeclarations"]]


WIRE = GeminiWire()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_contract(scenario, model_server, chain_env):
    scenario(WIRE, model_server, chain_env)


# ---------------------------------------------------------------------- Gemini's particulars


def provider():
    from llamaherd.plugins import registry

    return registry().providers["google"]


def model(server, model_id: str = "gemini-2.5-flash", **kw) -> ModelConfig:
    kw.setdefault("api_key", KEY)
    return ModelConfig("gem", "google", model_id, base_url=server.url + "/v1beta", **kw)


def complete(server, messages, tools=(), **kw):
    return provider().complete(list(messages), list(tools), model(server, **kw), {})


def test_registers_provider_and_unstaged_key_type():
    from llamaherd.plugins import registry

    reg = registry()
    assert reg.owner[("providers", "google")] == "google"
    assert reg.owner[("credential_types", "google_key")] == "google"
    assert provider().credential_type == "google_key" and provider().key_env == "GEMINI_API_KEY"
    assert reg.credential_types["google_key"].sandbox is False


def test_request_shape(model_server):
    model_server.reply(*WIRE.text("hi")[:2])
    messages = [
        Message("system", "You are an agent."),
        Message("system", "Be brief."),
        Message("user", "Do it."),
    ]
    complete(
        model_server,
        messages,
        [BASH],
        model_id="models/gemini-2.5-flash",
        max_tokens=500,
        temperature=0.2,
    )
    request = model_server.requests[0]
    assert request["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert request["headers"]["x-goog-api-key"] == KEY
    assert request["body"] == {
        "systemInstruction": {"parts": [{"text": "You are an agent.\n\nBe brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "Do it."}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "bash",
                        "description": "Run a shell command.",
                        "parametersJsonSchema": BASH.parameters,
                    }
                ]
            }
        ],
        "generationConfig": {"maxOutputTokens": 500, "temperature": 0.2},
    }


def test_results_of_one_turn_share_a_user_content_and_carry_gemini_ids(model_server):
    # Gemini 3 gives its calls ids; the responses must echo them.
    parts = [
        {"functionCall": {"id": "fc-1", "name": "bash", "args": {"command": "ls"}}},
        {
            "functionCall": {"id": "fc-2", "name": "bash", "args": {"command": "pwd"}},
            "thoughtSignature": "c2ln",
        },
    ]
    model_server.reply(*WIRE.response(parts)[:2])
    model_server.reply(*WIRE.text("done")[:2])
    first = complete(
        model_server, [Message("user", "go")], [BASH], model_id="gemini-3-flash-preview"
    )
    assert [c.id for c in first.tool_calls] == ["fc-1", "fc-2"]
    messages = [
        Message("user", "go"),
        Message("assistant", "", first.tool_calls, provider_data=first.provider_data),
        Message("tool", "a b", tool_call_id="fc-1"),
        Message("tool", "boom", tool_call_id="fc-2", is_error=True),
    ]
    complete(model_server, messages, [BASH], model_id="gemini-3-flash-preview")
    contents = model_server.requests[1]["body"]["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == parts  # signatures sent back untouched
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "bash", "response": {"output": "a b"}, "id": "fc-1"}},
        {"functionResponse": {"name": "bash", "response": {"error": "boom"}, "id": "fc-2"}},
    ]


def test_another_models_turn_is_rebuilt_with_the_documented_signature(model_server):
    # After a fallback the transcript holds another model's turn: its parts cannot be replayed.
    model_server.reply(*WIRE.text("ok")[:2])
    kept = {
        "google": {"model": "gemini-2.5-pro", "parts": [{"text": "x", "thoughtSignature": "zz"}]}
    }
    call = ToolCall("toolu_01", "bash", {"command": "ls"})
    messages = [
        Message("user", "go"),
        Message("assistant", "Listing.", [call], provider_data=kept),
        Message("tool", "a", tool_call_id="toolu_01"),
    ]
    complete(model_server, messages, [BASH], model_id="gemini-3-pro-preview")
    contents = model_server.requests[0]["body"]["contents"]
    assert contents[1]["parts"] == [
        {"text": "Listing."},
        {
            "functionCall": {"name": "bash", "args": {"command": "ls"}},
            "thoughtSignature": "skip_thought_signature_validator",
        },
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "bash", "response": {"output": "a"}}}
    ]


def test_thought_parts_are_not_text_and_thinking_is_billed_as_output(model_server):
    parts = [{"text": "Let me think...", "thought": True}, {"text": "The answer."}]
    usage = {
        "prompt": 1200,
        "candidates": 30,
        "thoughtsTokenCount": 200,
        "cachedContentTokenCount": 1000,
    }
    model_server.reply(*WIRE.response(parts, **usage)[:2])
    reply = complete(model_server, [Message("user", "q")])
    assert reply.text == "The answer."
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1200, 230)
    assert reply.usage.cached_input_tokens == 1000
    assert reply.provider_data["google"]["parts"] == parts


@pytest.mark.parametrize(
    ("model_id", "level", "expected"),
    [
        ("gemini-2.5-flash", "off", {"thinkingBudget": 0}),
        ("gemini-2.5-pro", "off", {"thinkingBudget": 128}),
        ("gemini-2.5-flash", "minimal", {"thinkingBudget": 512}),
        ("gemini-2.5-flash", "xhigh", {"thinkingBudget": 24576}),
        ("gemini-2.5-pro", "xhigh", {"thinkingBudget": 32768}),
        ("gemini-3-pro-preview", "medium", {"thinkingLevel": "high"}),
        ("gemini-3-pro-preview", "off", {"thinkingLevel": "low"}),
        ("gemini-3-flash-preview", "off", {"thinkingLevel": "minimal"}),
        ("gemini-3-flash-preview", "medium", {"thinkingLevel": "medium"}),
        ("gemini-2.0-flash", "high", None),
        ("gemini-2.5-flash", None, None),
    ],
)
def test_thinking_level(model_id, level, expected):
    from llamaherd_google.gemini import request_body

    cfg = ModelConfig("g", "google", model_id, thinking_level=level)
    body = request_body([Message("user", "x")], [], cfg)
    assert body.get("generationConfig", {}).get("thinkingConfig") == expected


def test_thinking_budget_overrides_the_level():
    from llamaherd_google.gemini import request_body

    cfg = ModelConfig(
        "g", "google", "gemini-2.5-pro", thinking_level="low", extra={"thinking_budget": -1}
    )
    body = request_body([Message("user", "x")], [], cfg)
    assert body["generationConfig"]["thinkingConfig"] == {"thinkingBudget": -1}


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (403, gemini_error(403, "PERMISSION_DENIED", "Permission denied"), AuthError),
        (
            400,
            gemini_error(
                400, "FAILED_PRECONDITION", "User location is not supported for the API use."
            ),
            Unavailable,
        ),
        (404, gemini_error(404, "NOT_FOUND", "models/gemini-9 is not found"), Unavailable),
        (400, gemini_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received."), Fatal),
        (504, gemini_error(504, "DEADLINE_EXCEEDED", "Deadline exceeded"), Transient),
    ],
)
def test_error_classes(model_server, status, body, error):
    model_server.reply(status, body)
    with pytest.raises(error) as err:
        complete(model_server, [Message("user", "x")])
    assert str(err.value).startswith("google: ") and KEY not in str(err.value)


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ({"promptFeedback": {"blockReason": "SAFETY"}}, Fatal, r"prompt was blocked \(SAFETY\)"),
        ({"candidates": [{"finishReason": "SAFETY", "index": 0}]}, Fatal, "withheld"),
        (
            {"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]},
            Transient,
            "malformed function call",
        ),
        ({"candidates": "nope"}, Fatal, "unexpected reply"),
        (
            {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
            Fatal,
            "functionCall",
        ),
    ],
)
def test_replies_without_an_answer(model_server, body, error, message):
    model_server.reply(200, body)
    with pytest.raises(error, match=message):
        complete(model_server, [Message("user", "x")])


def test_an_empty_turn_at_max_tokens_is_a_reply(model_server):
    model_server.reply(
        200, {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]}
    )
    reply = complete(model_server, [Message("user", "x")])
    assert (reply.text, reply.tool_calls, reply.stop_reason) == ("", [], "MAX_TOKENS")


def test_cost_from_the_price_table(model_server, chain_env):
    model_server.reply(
        *WIRE.response(
            [{"text": "hi"}], prompt=100_000, candidates=1_000, cachedContentTokenCount=60_000
        )[:2]
    )
    chain = chain_env.make(
        WIRE.table("g", model_server.url, "gemini-2.5-flash-001"),
        ["g"],
        {("google_key", "default"): {"token": KEY}},
    )
    reply = chain.complete([Message("user", "x")], [], {})
    # gemini-2.5-flash: 0.30 in, 0.075 cached, 2.50 out per million.
    assert reply.usage.cost_usd == pytest.approx(
        (40_000 * 0.3 + 60_000 * 0.075 + 1_000 * 2.5) / 1e6
    )


def test_key_from_the_environment(model_server, chain_env, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "env-key")
    model_server.reply(*WIRE.text("hi")[:2])
    chain = chain_env.make(WIRE.table("g", model_server.url), ["g"], {})
    chain.complete([Message("user", "x")], [], {})
    assert model_server.requests[0]["headers"]["x-goog-api-key"] == "env-key"


def test_nothing_secret_in_a_rate_limit_event(model_server, chain_env):
    model_server.reply(*WIRE.rate_limited(0.01)[:2])
    model_server.reply(*WIRE.text("ok")[:2])
    chain = chain_env.make(
        WIRE.table("g", model_server.url), ["g"], {("google_key", "default"): {"token": KEY}}
    )
    chain.complete([Message("user", "the plan")], [], {})
    shown = json.dumps(chain_env.events)
    assert KEY not in shown and "the plan" not in shown and model_server.url not in shown

"""Scenarios every HTTP model provider must pass, each over real HTTP against ``model_server``.

A provider's test supplies a ``Wire``: its API's shape as reply builders (what the server
answers) and request readers (what the provider sent). The scenarios are the same for every
provider: a tool-call round trip, 429 with a retry-after, 401, 5xx, a malformed body, falling
back to the next model, and the cost recorded for a call. Use them with the ``model_server`` and
``chain_env`` fixtures of ``llamaherd.testing``::

    from llamaherd.provider_contract import SCENARIOS

    @pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
    def test_contract(scenario, model_server, chain_env):
        scenario(MyWire(), model_server, chain_env)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from llamaherd.errors import AuthError, Fatal, RateLimited
from llamaherd.types import Message, ToolSpec

KEY = "sk-contract-SECRET-0123456789"
PROMPT = "the secret plan is pineapple"
BASH = ToolSpec(
    "bash",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
Reply = tuple[int, Any, dict[str, str]]  # status, body (JSON-able or bytes), headers


class Wire:
    """One provider's API as the scenarios see it. Subclasses fill in the builders/readers."""

    provider: str  # the provider name in [models.<name>]
    credential_type: str
    path: str = "/v1"  # base_url is the server's URL plus this

    def __str__(self) -> str:
        return self.provider

    # ------------------------------------------------------------------ replies the server sends

    def text(self, text: str, input_tokens: int = 10, output_tokens: int = 5) -> Reply:
        """A final text answer with this usage."""
        raise NotImplementedError

    def tool_calls(self, calls: list[tuple[str, dict[str, Any]]]) -> Reply:
        """A turn that calls tools: ``[(name, arguments), ...]``."""
        raise NotImplementedError

    def rate_limited(self, seconds: float) -> Reply:
        """429 saying to come back after ``seconds``."""
        raise NotImplementedError

    def unauthorized(self) -> Reply:
        """The API's answer to a refused key (its text quotes the key, as some do)."""
        raise NotImplementedError

    def server_error(self) -> Reply:
        """A 5xx the API sends when it is overloaded or broken."""
        raise NotImplementedError

    def unavailable(self) -> Reply:
        """What the API says when this model cannot serve now and waiting will not help
        (quota or credits exhausted, model gone): the chain must fall back at once."""
        raise NotImplementedError

    def malformed(self) -> Reply:
        """A 200 whose body is not this API's reply."""
        return (200, b"<html><body>502 proxy error</body></html>", {})

    # ------------------------------------------------------------------ what the provider sent

    def sent_key(self, request: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def sent_model(self, request: dict[str, Any]) -> str:
        raise NotImplementedError

    def sent_calls(self, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls of the assistant turns sent back, in order."""
        raise NotImplementedError

    def sent_results(self, request: dict[str, Any]) -> list[tuple[str, bool]]:
        """The tool results sent, in order: (text, is_error). An API without an error flag
        says it in the text; the reader reports what the model is told."""
        raise NotImplementedError

    def sent_tools(self, request: dict[str, Any]) -> list[str]:
        """The names of the tools offered."""
        raise NotImplementedError

    # ------------------------------------------------------------------ config

    def table(self, name: str, url: str, model: str = "test-model", extra: str = "") -> str:
        return (
            f'[models.{name}]\nprovider = "{self.provider}"\nmodel = "{model}"\n'
            f'base_url = "{url}{self.path}"\n{extra}'
        )

    def chain(self, server: Any, env: Any, names: tuple[str, ...] = ("m",), extra: str = ""):
        config = "".join(self.table(n, server.url, f"model-{n}", extra) for n in names)
        keys = {(self.credential_type, "default"): {"token": KEY}}
        return env.make(config, list(names), keys)


def _queue(server: Any, *replies: Reply) -> None:
    for status, body, headers in replies:
        server.reply(status, body, headers)


def _events(env: Any, kind: str) -> list[dict[str, Any]]:
    return [data for k, data in env.events if k == kind]


# ---------------------------------------------------------------------- the scenarios


def tool_call_round_trip(wire: Wire, server: Any, env: Any) -> None:
    """A tool call comes back normalised; the call and its results go back in the API's shape."""
    chain = wire.chain(server, env)
    _queue(server, wire.tool_calls([("bash", {"command": "ls -la"})]), wire.text("Done."))
    messages = [Message("system", "You are an agent."), Message("user", "List the files.")]
    reply = chain.complete(messages, [BASH], {})
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("bash", {"command": "ls -la"})]
    call_id = reply.tool_calls[0].id
    assert call_id
    first = server.requests[0]
    assert wire.sent_key(first) == KEY
    assert wire.sent_model(first) == "model-m"
    assert wire.sent_tools(first) == ["bash"]
    messages += [
        Message("assistant", reply.text, reply.tool_calls, provider_data=reply.provider_data),
        Message("tool", "a.txt b.txt", tool_call_id=call_id),
    ]
    assert chain.complete(messages, [BASH], {}).text == "Done."
    second = server.requests[1]
    assert wire.sent_calls(second) == [("bash", {"command": "ls -la"})]
    assert wire.sent_results(second) == [("a.txt b.txt", False)]


def error_results_are_marked(wire: Wire, server: Any, env: Any) -> None:
    """A failed tool's result reaches the model as an error."""
    chain = wire.chain(server, env)
    _queue(server, wire.tool_calls([("bash", {"command": "false"})]), wire.text("ok"))
    messages = [Message("user", "Run it.")]
    reply = chain.complete(messages, [BASH], {})
    messages += [
        Message("assistant", reply.text, reply.tool_calls, provider_data=reply.provider_data),
        Message("tool", "exit 1", tool_call_id=reply.tool_calls[0].id, is_error=True),
    ]
    chain.complete(messages, [BASH], {})
    ((text, is_error),) = wire.sent_results(server.requests[1])
    assert is_error and "exit 1" in text


def rate_limited_then_served(wire: Wire, server: Any, env: Any) -> None:
    """429 is retried after the server's retry-after, then the answer is used."""
    chain = wire.chain(server, env)
    _queue(server, wire.rate_limited(0.05), wire.rate_limited(0.05), wire.text("finally"))
    assert chain.complete([Message("user", "hi")], [], {}).text == "finally"
    assert len(server.requests) == 3
    retries = _events(env, "provider_error")
    assert [(r["error_class"], r["delay_s"], r["action"]) for r in retries] == [
        ("RateLimited", 0.05, "retry")
    ] * 2


def unauthorized_is_an_auth_error(wire: Wire, server: Any, env: Any) -> None:
    """A refused key ends the call at once (no retry) without the key in the message."""
    chain = wire.chain(server, env)
    _queue(server, wire.unauthorized())
    with pytest.raises(AuthError) as err:
        chain.complete([Message("user", PROMPT)], [], {})
    assert len(server.requests) == 1
    shown = str(err.value) + json.dumps(env.events)
    assert str(err.value).startswith(f"{wire.provider}: ")
    assert KEY not in shown and PROMPT not in shown and server.url not in shown


def server_error_is_retried(wire: Wire, server: Any, env: Any) -> None:
    """A 5xx is Transient: retried with backoff until the server answers."""
    chain = wire.chain(server, env)
    _queue(server, wire.server_error(), wire.server_error(), wire.text("recovered"))
    assert chain.complete([Message("user", "hi")], [], {}).text == "recovered"
    classes = [r["error_class"] for r in _events(env, "provider_error")]
    assert classes == ["Transient", "Transient"]


def malformed_body_is_fatal(wire: Wire, server: Any, env: Any) -> None:
    """A 200 that is not this API's reply ends the call (not retried) with a clear message."""
    chain = wire.chain(server, env)
    _queue(server, wire.malformed())
    with pytest.raises(Fatal, match=rf"^{wire.provider}: "):
        chain.complete([Message("user", "hi")], [], {})
    assert len(server.requests) == 1


def falls_back_to_the_next_model(wire: Wire, server: Any, env: Any) -> None:
    """When the first model cannot serve, the next one answers, with nothing retried."""
    chain = wire.chain(server, env, names=("first", "second"))
    _queue(server, wire.unavailable(), wire.text("from the second"))
    assert chain.complete([Message("user", "hi")], [], {}).text == "from the second"
    first, second = server.requests
    assert wire.sent_model(first) == "model-first" and wire.sent_model(second) == "model-second"
    fallback = _events(env, "provider_error")
    assert [(e["model"], e["error_class"], e["action"]) for e in fallback] == [
        ("first", "Unavailable", "fallback")
    ]


def exhausted_retries_fall_back(wire: Wire, server: Any, env: Any) -> None:
    """A model that keeps failing transiently is given up after the retries; the next answers."""
    from llamaherd.models import MAX_RETRIES

    chain = wire.chain(server, env, names=("first", "second"))
    _queue(server, *[wire.server_error()] * (MAX_RETRIES + 1), wire.text("second"))
    assert chain.complete([Message("user", "hi")], [], {}).text == "second"
    assert wire.sent_model(server.requests[-1]) == "model-second"
    actions = [e["action"] for e in _events(env, "provider_error")]
    assert actions == ["retry"] * MAX_RETRIES + ["fallback"]


def cost_is_recorded(wire: Wire, server: Any, env: Any) -> None:
    """Each call's tokens and cost reach the model_call event and the reply's usage."""
    pricing = "pricing = { input = 2.0, output = 10.0 }\n"
    chain = wire.chain(server, env, extra=pricing)
    _queue(server, wire.text("priced", input_tokens=3000, output_tokens=400))
    reply = chain.complete([Message("user", "hi")], [], {})
    ((call,),) = [_events(env, "model_call")]
    assert (call["input_tokens"], call["output_tokens"]) == (3000, 400)
    assert call["cost_usd"] == pytest.approx(3000 * 2.0 / 1e6 + 400 * 10.0 / 1e6)
    assert reply.usage.cost_usd == call["cost_usd"]


def rate_limit_without_retry_after_backs_off(wire: Wire, server: Any, env: Any) -> None:
    """A 429 that names no delay is retried with the chain's own backoff."""
    chain = wire.chain(server, env)
    status, body, _ = wire.rate_limited(1)
    _queue(server, (status, _without_delay(body), {}), wire.text("ok"))
    assert chain.complete([Message("user", "hi")], [], {}).text == "ok"
    (retry,) = _events(env, "provider_error")
    assert retry["error_class"] == RateLimited.__name__ and retry["delay_s"] > 0


def _without_delay(body: Any) -> Any:
    """``body`` without a RetryInfo detail (some APIs say the delay there, not in a header)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = dict(body["error"])
        error.pop("details", None)
        return {**body, "error": error}
    return body


SCENARIOS: list[Callable[[Wire, Any, Any], None]] = [
    tool_call_round_trip,
    error_results_are_marked,
    rate_limited_then_served,
    rate_limit_without_retry_after_backs_off,
    unauthorized_is_an_auth_error,
    server_error_is_retried,
    malformed_body_is_fatal,
    falls_back_to_the_next_model,
    exhausted_retries_fall_back,
    cost_is_recorded,
]

"""ModelChain: resolving [models.*], keys, retries, fallback, circuit breaker, events.

The providers here are in-process stand-ins for the model APIs (the edge we cannot reach); the
HTTP providers are tested against wire-format servers in their own plugins' tests.
"""

from __future__ import annotations

import json
import re
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from llamaherd.install import install_command
from llamaherd.models import CircuitBreaker, ModelChain
from llamaherd.providers import http_error, parse_retry_after, scrub
from llamaherd.types import (
    AuthError,
    ConfigError,
    Fatal,
    Message,
    Pricing,
    RateLimited,
    Reply,
    Transient,
    Unavailable,
    Usage,
)

KEY = "sk-test-SECRET-123"
PROMPT = "the secret plan is pineapple"


class FakeProvider:
    """Answers from a queue: an exception instance is raised, a string is replied."""

    description = "test"
    schema: dict[str, Any] = {}

    def __init__(
        self, name: str, credential_type: str | None = "fake_key", key_required: bool = True
    ):
        self.name = name
        self.credential_type = credential_type
        self.key_required = key_required
        self.queue: list[Any] = []
        self.calls: list[str] = []

    def complete(self, messages, tools, model, options) -> Reply:
        self.calls.append(model.name)
        item = self.queue.pop(0) if self.queue else "ok"
        if isinstance(item, BaseException):
            raise item
        return Reply(text=f"{model.name}:{item}", usage=Usage(10, 3))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def env(tmp_project, monkeypatch):
    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0.5")
    tmp_project.config(
        """
        [models.first]
        provider = "fake"
        model = "m1"
        [models.second]
        provider = "fake"
        model = "m2"
        credential = "other"
        """
    )
    tmp_project.add_agent("bot", 'models = ["first", "second"]\n')
    provider = FakeProvider("fake")
    events: list[tuple[str, dict[str, Any]]] = []
    sleeps: list[float] = []
    clock = Clock()
    keys = {("fake_key", "default"): {"token": KEY}, ("fake_key", "other"): {"token": KEY + "2"}}

    def make(agent: str = "bot", providers: dict[str, Any] | None = None) -> ModelChain:
        project = tmp_project.load()
        registry = SimpleNamespace(providers=providers or {"fake": provider})
        return ModelChain(
            project,
            project.agent(agent),
            registry,
            lambda t, i: keys.get((t, i)),
            lambda kind, data: events.append((kind, data)),
            breaker=CircuitBreaker(60, clock),
            sleep=sleeps.append,
        )

    return SimpleNamespace(
        make=make,
        provider=provider,
        events=events,
        sleeps=sleeps,
        clock=clock,
        project=tmp_project,
        keys=keys,
    )


def ask(chain: ModelChain) -> Reply:
    return chain.complete([Message("user", PROMPT)], [], {})


def test_resolves_models_and_keys(env):
    chain = env.make()
    first, second = chain.models
    assert (first.name, first.provider, first.model, first.api_key) == ("first", "fake", "m1", KEY)
    assert second.api_key == KEY + "2"  # credential = "other": an instance of fake_key


def test_unknown_model_names_agent_config_and_key(env):
    env.project.add_agent("typo", 'models = ["frist"]\n')
    with pytest.raises(ConfigError) as err:
        env.make("typo")
    assert err.value.file.endswith("agents/typo/config.toml")
    assert err.value.key == "models"
    assert "'frist'" in str(err.value) and "did you mean 'first'" in str(err.value)


def test_no_models_is_a_config_error(env):
    env.project.add_agent("none", "")
    with pytest.raises(ConfigError, match="models"):
        env.make("none")


def test_missing_provider_names_the_distribution(env):
    env.project.config('[models.x]\nprovider = "anthropic"\nmodel = "c"\n')
    env.project.add_agent("a", 'models = ["x"]\n')
    with pytest.raises(ConfigError, match=re.escape(install_command("llamaherd-anthropic"))) as err:
        env.make("a")
    assert err.value.key == "models.x.provider"


def test_bad_model_value_names_key(env):
    env.project.config('[models.x]\nprovider = "fake"\nmodel = "c"\nthinkingLevel = "huge"\n')
    env.project.add_agent("a", 'models = ["x"]\n')
    with pytest.raises(ConfigError) as err:
        env.make("a")
    assert err.value.key == "models.x.thinkingLevel" and "medium" in str(err.value)


def test_missing_key_says_how_to_add_it(env):
    env.keys.clear()
    with pytest.raises(AuthError, match=r"al creds add fake_key"):
        env.make()


def test_missing_optional_key_is_fine(env):
    env.keys.clear()
    provider = FakeProvider("fake", key_required=False)
    chain = env.make(providers={"fake": provider})
    assert [m.api_key for m in chain.models] == [None, None]


def test_key_from_environment(env, monkeypatch):
    env.keys.clear()
    env.provider.key_env = "FAKE_API_KEY"
    monkeypatch.setenv("FAKE_API_KEY", "from-env")
    assert env.make().models[0].api_key == "from-env"


def test_rate_limit_retries_honour_retry_after_then_succeed(env):
    env.provider.queue = [RateLimited("fake: 429", retry_after=2.5), Transient("fake: 503"), "fine"]
    reply = ask(env.make())
    assert reply.text == "first:fine"
    # retry-after is honoured; without one the backoff is base * 2**attempt.
    assert env.sleeps == [2.5, 1.0]
    retries = [d for k, d in env.events if k == "provider_error"]
    assert [(r["error_class"], r["action"], r["attempt"]) for r in retries] == [
        ("RateLimited", "retry", 1),
        ("Transient", "retry", 2),
    ]
    calls = [d for k, d in env.events if k == "model_call"]
    assert [c["ok"] for c in calls] == [False, False, True]
    assert calls[-1]["input_tokens"] == 10 and calls[-1]["output_tokens"] == 3


def test_long_retry_after_is_capped(env):
    env.provider.queue = [RateLimited("fake: 429", retry_after=3600)]
    ask(env.make())
    assert env.sleeps == [60.0]


def test_exhausted_retries_fall_back_and_trip_the_breaker(env):
    env.provider.queue = [Transient("fake: 500")] * 6
    chain = env.make()
    assert ask(chain).text == "second:ok"
    assert env.provider.calls == ["first"] * 6 + ["second"]
    assert env.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0]
    # Within 60 s the first model is skipped without a call.
    env.provider.calls.clear()
    assert ask(chain).text == "second:ok"
    assert env.provider.calls == ["second"]
    assert any(
        k == "provider_error" and d["action"] == "skip" and d["model"] == "first"
        for k, d in env.events
    )
    env.clock.now += 61
    env.provider.calls.clear()
    assert ask(chain).text == "first:ok"
    assert env.provider.calls == ["first"]


def test_unavailable_falls_back_at_once(env):
    env.provider.queue = [Unavailable("fake: HTTP 404 (model not found)")]
    assert ask(env.make()).text == "second:ok"
    assert env.sleeps == []


def test_every_model_down_raises_last_error_class(env):
    env.provider.queue = [Unavailable("fake: out"), RateLimited("fake: 429", retry_after=0)] + [
        RateLimited("fake: 429", retry_after=0)
    ] * 5
    with pytest.raises(RateLimited, match=r"all models failed \(first, second\)"):
        ask(env.make())


def test_all_tripped_models_are_still_tried(env):
    chain = env.make()
    chain.breaker.trip("first")
    chain.breaker.trip("second")
    assert ask(chain).text == "first:ok"


def test_auth_error_and_fatal_propagate_without_retry(env):
    env.provider.queue = [AuthError("fake: refused")]
    with pytest.raises(AuthError):
        ask(env.make())
    env.provider.queue = [Fatal("fake: bad request")]
    with pytest.raises(Fatal):
        ask(env.make())
    assert env.provider.calls == ["first", "first"] and env.sleeps == []


def test_provider_bug_becomes_fatal_without_details(env):
    env.provider.queue = [KeyError(PROMPT)]
    with pytest.raises(Fatal, match=r"^fake: internal error \(KeyError\)$"):
        ask(env.make())
    assert env.events[-1][1]["error_class"] == "Fatal"


def test_events_never_carry_key_or_prompt(env):
    env.provider.queue = [Transient(f"fake: echoed {KEY}"), "ok"]
    ask(env.make())
    dumped = json.dumps(env.events)
    assert KEY not in dumped and PROMPT not in dumped
    assert {k for k, _ in env.events} == {"model_call", "provider_error"}


def test_retry_base_delay_from_env(env, monkeypatch):
    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0")
    env.provider.queue = [Transient("x"), Transient("x"), "ok"]
    ask(env.make())
    assert env.sleeps == [0.0, 0.0]


# ---------------------------------------------------------------- HTTP helpers


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (429, RateLimited),
        (401, AuthError),
        (403, AuthError),
        (500, Transient),
        (529, Transient),
        (408, Transient),
        (404, Unavailable),
        (400, Fatal),
        (422, Fatal),
    ],
)
def test_http_error_classes(status, cls):
    body = json.dumps({"error": {"type": "x_error", "message": f"bad {KEY}"}})
    error = http_error("prov", status, {"retry-after": "3"}, body, [KEY])
    assert type(error) is cls
    assert str(error).startswith("prov: ") and KEY not in str(error)
    if cls is RateLimited:
        assert error.retry_after == 3.0


def test_scrub():
    assert scrub("a KEY b http://h:1 c", ["KEY", "http://h:1", None, ""]) == "a *** b *** c"


def test_cancelled_wait_stops_retrying_without_fallback(env):
    cancel = threading.Event()
    cancel.set()
    chain = env.make()
    chain.sleep = cancel.wait
    env.provider.queue = [Transient("fake: 503")]
    with pytest.raises(Transient, match="^fake: 503$"):
        ask(chain)
    assert env.provider.calls == ["first"]


def test_models_must_be_a_list_of_names(env):
    env.project.add_agent("str", 'models = "first"\n')
    with pytest.raises(ConfigError, match="expected a list") as err:
        env.make("str")
    assert err.value.key == "models"


# --------------------------------------------------------------------------- prices and cost


def test_a_providers_verdict_wins_over_the_status():
    body = json.dumps({"error": {"message": "Insufficient credits"}})
    assert type(http_error("p", 402, {}, body, [], Unavailable)) is Unavailable
    assert type(http_error("p", 400, {}, "bad key", [], AuthError)) is AuthError
    assert type(http_error("p", 498, {}, "{}", [], Transient)) is Transient


def test_retry_delay_in_a_google_error_body():
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
    body = json.dumps({"error": {"code": 429, "details": [{"@type": "x"}, detail]}})
    assert http_error("g", 429, {}, body, []).retry_after == 37.0
    assert http_error("g", 429, {"retry-after": "2"}, body, []).retry_after == 2.0


def test_price_lookup_matches_snapshots_only():
    from llamaherd.pricing import price_for

    table = {
        "gpt-4o": Pricing(2.5, 10),
        "claude-opus-4": Pricing(15, 75),
        "gemini-2.0-flash": Pricing(0.1, 0.4),
        "mistral-large-latest": Pricing(0.5, 1.5),
    }
    assert price_for(table, "gpt-4o-2024-08-06") == table["gpt-4o"]
    assert price_for(table, "claude-opus-4-20250514") == table["claude-opus-4"]
    assert price_for(table, "gemini-2.0-flash-001") == table["gemini-2.0-flash"]
    assert price_for(table, "mistral-large-latest") == table["mistral-large-latest"]
    for other in ("gpt-4o-mini", "claude-opus-4-5", "mistral-large-2411", "gpt-4"):
        assert price_for(table, other) is None, other
    assert price_for({**table, "*": Pricing(0, 0)}, "anything") == Pricing(0, 0)


def test_cost_of_cached_and_written_prompt_tokens():
    from llamaherd.pricing import cost_usd

    usage = Usage(input_tokens=10_000, output_tokens=1_000, cached_input_tokens=6_000,
                  cache_write_tokens=3_000)  # fmt: skip
    full = Pricing(3.0, 15.0, cached_input=0.3, cache_write=3.75)
    expected = (1_000 * 3.0 + 6_000 * 0.3 + 3_000 * 3.75 + 1_000 * 15.0) / 1e6
    assert cost_usd(usage, full) == pytest.approx(expected)
    # Without cache rates every prompt token is billed as input.
    assert cost_usd(usage, Pricing(3.0, 15.0)) == pytest.approx((10_000 * 3.0 + 15_000) / 1e6)


def test_cost_precedence_config_then_reported_then_table():
    from llamaherd.pricing import call_cost

    table = {"m": Pricing(1.0, 1.0)}
    usage = Usage(1_000_000, 0)
    assert call_cost(usage, None, table, "m") == 1.0
    assert call_cost(Usage(1_000_000, 0, cost_usd=0.5), None, table, "m") == 0.5
    assert call_cost(Usage(1_000_000, 0, cost_usd=0.5), Pricing(2.0, 2.0), table, "m") == 2.0
    assert call_cost(usage, None, table, "unknown") is None


class PricedProvider(FakeProvider):
    prices = {"m1": Pricing(3.0, 15.0)}


def test_model_call_events_carry_the_cost(env):
    provider = PricedProvider("fake")
    chain = env.make(providers={"fake": provider})
    reply = ask(chain)  # FakeProvider reports Usage(10, 3)
    expected = (10 * 3.0 + 3 * 15.0) / 1e6
    assert reply.usage.cost_usd == pytest.approx(expected)
    (call,) = [d for k, d in env.events if k == "model_call"]
    assert call["cost_usd"] == pytest.approx(expected) and call["cached_input_tokens"] == 0


def test_failed_attempts_cost_nothing_and_unknown_prices_are_none(env):
    env.provider.queue = [RateLimited("slow", retry_after=0)]
    ask(env.make())
    costs = [d["cost_usd"] for k, d in env.events if k == "model_call"]
    assert costs == [0.0, None]  # the 429 billed nothing; "m1" has no price in FakeProvider


@pytest.mark.parametrize(
    ("pricing", "ok"),
    [
        ("{ input = 3.0, output = 15 }", True),
        ("{ input = 3.0, output = 15.0, cached_input = 0.3, cache_write = 3.75 }", True),
        ("{ input = 3.0 }", False),
        ("{ input = -1, output = 1 }", False),
        ("{ input = 1, output = 1, per = 1000 }", False),
        ('"cheap"', False),
    ],
)
def test_pricing_in_the_model_table(env, pricing, ok):
    env.project.config(f'[models.x]\nprovider = "fake"\nmodel = "c"\npricing = {pricing}\n')
    env.project.add_agent("a", 'models = ["x"]\n')
    if ok:
        assert env.make("a").models[0].pricing.input == 3.0
        return
    with pytest.raises(ConfigError) as err:
        env.make("a")
    assert err.value.key == "models.x.pricing" and "USD per million tokens" in str(err.value)


def test_base_url_has_two_spellings(env):
    env.project.config('[models.x]\nprovider = "fake"\nmodel = "c"\nbaseUrl = "http://h:1/v1"\n')
    env.project.add_agent("a", 'models = ["x"]\n')
    assert env.make("a").models[0].base_url == "http://h:1/v1"
    env.project.config(
        '[models.x]\nprovider = "fake"\nmodel = "c"\nbaseUrl = "http://h:1/v1"\n'
        'base_url = "http://other:2/v1"\n'
    )
    with pytest.raises(ConfigError, match="set either baseUrl or base_url"):
        env.make("a")


class CheckingProvider(FakeProvider):
    def validate(self, model):
        return [] if model.base_url else ["needs base_url"]


def test_a_providers_own_checks_stop_the_chain(env):
    with pytest.raises(ConfigError, match="needs base_url") as err:
        env.make(providers={"fake": CheckingProvider("fake")})
    assert err.value.key == "models.first"

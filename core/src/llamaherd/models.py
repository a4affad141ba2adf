"""The model chain: an agent's models in order, with retries, fallback and a circuit breaker.

``ModelChain(project, agent, registry, key_lookup, on_event)`` resolves the names in the agent's
``models`` list against the project's ``[models.<name>]`` tables (first primary, rest fallbacks)
and looks up each model's key. ``complete(messages, tools, options)`` then asks the current model:

- ``RateLimited`` and ``Transient`` are retried up to ``MAX_RETRIES`` times with exponential
  backoff (base ``$AL_RETRY_BASE_DELAY``, default 1 s), honouring the server's retry-after;
  each wait is capped at ``MAX_DELAY``.
- When the retries are spent, or at once on ``Unavailable`` (quota exhausted, model missing),
  the model is skipped for ``BREAKER_SECONDS`` (process-wide) and the next one is asked.
- ``AuthError`` and ``Fatal`` propagate at once: the session counts auth failures.

Keys: an agent that lists a credential of the model's key type (``credentials =
["anthropic_key:team-a"]``) uses that instance; else ``credential`` in the model table names an
instance of the provider's ``credential_type`` (``"work"``) or a ``"type:instance"``; the
``token`` field is used, else the env var named by the provider's optional ``key_env``. A provider with ``key_required = False``
(OpenAI-compatible local servers) may have none; otherwise a missing key is an AuthError naming
``al creds add``.

Events (``on_event(kind, data)``), never with keys or prompt text:
``model_call`` {model, provider, duration_ms, input_tokens, output_tokens, cached_input_tokens,
cost_usd, ok, error_class} for every attempt (``cost_usd`` by ``llamaherd.pricing``: the table's
``pricing``, else the API's own figure, else the provider's ``prices``; None when unknown, 0 for
a failed attempt, which bills nothing; the reply's ``usage.cost_usd`` carries it to the session); ``provider_error`` {model, provider, error_class, message, attempt, action
(retry | fallback | skip), delay_s} for every retry, fallback and breaker skip;
``usage_refused`` {model, provider, refused, input_tokens, output_tokens, message} for a reply
whose usage cannot be right (``llamaherd.usage``: counted as the call's size instead).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llamaherd.compat import AUTH_TYPES
from llamaherd.errors import (
    AuthError,
    ConfigError,
    Fatal,
    LlamaherdError,
    ProviderError,
    RateLimited,
    Transient,
    Unavailable,
)
from llamaherd.pricing import call_cost, parse_pricing
from llamaherd.providers import scrub
from llamaherd.types import Message, ModelConfig, Reply, ToolSpec, Usage
from llamaherd.usage import checked

log = logging.getLogger("llamaherd.models")

MAX_RETRIES = 5
MAX_DELAY = 60.0  # seconds; a longer retry-after is clipped rather than stalling the run
BREAKER_SECONDS = 60.0
# Keys of a [models.<name>] table that core understands; the rest go to ModelConfig.extra and
# must be declared in the provider's ``schema``.
CORE_KEYS = {
    "provider": "provider",
    "model": "model",
    "authType": "auth_type",
    "thinkingLevel": "thinking_level",
    "base_url": "base_url",
    "baseUrl": "base_url",  # Action Llama's spelling
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "pricing": "pricing",
}
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")

KeyLookup = Callable[[str, str], "Mapping[str, str] | None"]
OnEvent = Callable[[str, dict[str, Any]], None]


# --------------------------------------------------------------------------- circuit breaker


class CircuitBreaker:
    """Remembers which models failed recently; a tripped model is skipped for ``seconds``."""

    def __init__(
        self, seconds: float = BREAKER_SECONDS, clock: Callable[[], float] = time.monotonic
    ):
        self.seconds = seconds
        self.clock = clock
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def trip(self, name: str) -> None:
        with self._lock:
            self._until[name] = self.clock() + self.seconds

    def reset(self, name: str) -> None:
        with self._lock:
            self._until.pop(name, None)

    def is_open(self, name: str) -> bool:
        """True while ``name`` should be skipped."""
        with self._lock:
            until = self._until.get(name)
            if until is None:
                return False
            if self.clock() >= until:
                del self._until[name]
                return False
            return True

    def clear(self) -> None:
        with self._lock:
            self._until.clear()


BREAKER = CircuitBreaker()  # process-wide: every run in a scheduler shares what failed


# --------------------------------------------------------------------------- resolving models


def _close(name: str, names: Iterable[str]) -> str:
    import difflib

    match = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _model_tables(project: Any) -> dict[str, Any]:
    tables = project.config.get("models", {})
    return tables if isinstance(tables, dict) else {}


@dataclass
class ModelEntry:
    """A resolved model: its config (key included), its provider, the secrets to scrub."""

    config: ModelConfig
    provider: Any
    secrets: list[str] = field(default_factory=list)


def resolve_model(
    project: Any,
    name: str,
    registry: Any,
    key_lookup: KeyLookup,
    own_keys: Mapping[str, str] | None = None,
) -> ModelEntry:
    """Build the ModelConfig of ``[models.<name>]`` and look up its key (the instance of its
    key type in ``own_keys``, an agent's own, wins over the table's)."""
    file = str(project.config_file)
    table = _model_tables(project).get(name)
    if not isinstance(table, dict):
        raise ConfigError(file, f"models.{name}", "expected a table (provider = ..., model = ...)")
    provider_name = table.get("provider")
    providers = registry.providers
    if not isinstance(provider_name, str) or not provider_name:
        known = ", ".join(sorted(providers)) or "none installed"
        raise ConfigError(file, f"models.{name}.provider", f"required: a provider name ({known})")
    provider = providers.get(provider_name)
    if provider is None:
        from llamaherd.install import install_command
        from llamaherd.plugins import PROVIDED_BY

        dist = PROVIDED_BY.get(("providers", provider_name))
        hint = (
            f"; install it with `{install_command(dist)}`"
            if dist
            else _close(provider_name, providers)
        )
        raise ConfigError(
            file, f"models.{name}.provider", f"provider {provider_name!r} is not installed{hint}"
        )
    config = model_config(file, name, table)
    problems = provider_problems(provider, config)
    if problems:
        raise ConfigError(file, f"models.{name}", problems[0])
    secrets = _attach_key(file, config, table, provider, key_lookup, own_keys or {})
    return ModelEntry(config, provider, secrets)


def provider_problems(provider: Any, config: ModelConfig) -> list[str]:
    """What the provider's optional ``validate(model)`` finds wrong with a model's table."""
    validate = getattr(provider, "validate", None)
    return [str(problem) for problem in validate(config)] if validate else []


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and re.match(r"https?://", value) is not None


# Value checks of the core keys: (predicate, what was expected).
MODEL_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: isinstance(v, str) and v != "", "a model id string"),
    "authType": (lambda v: v in AUTH_TYPES, "one of " + ", ".join(AUTH_TYPES)),
    "thinkingLevel": (lambda v: v in THINKING_LEVELS, "one of " + ", ".join(THINKING_LEVELS)),
    "base_url": (_is_url, "an http:// or https:// URL"),
    "baseUrl": (_is_url, "an http:// or https:// URL"),
    "max_tokens": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "a positive integer",
    ),
    "temperature": (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "a number",
    ),
    "pricing": (
        lambda v: parse_pricing(v) is not None,
        "a table of USD per million tokens: input and output (required), cached_input, "
        "cache_write; numbers >= 0",
    ),
}


def model_config(file: str, name: str, table: dict[str, Any]) -> ModelConfig:
    values = {attr: table[key] for key, attr in CORE_KEYS.items() if key in table}
    extra = {k: v for k, v in table.items() if k not in CORE_KEYS and k != "credential"}
    for key, (ok, expected) in MODEL_CHECKS.items():
        if key in table and not ok(table[key]):
            raise ConfigError(file, f"models.{name}.{key}", f"expected {expected}")
    if "model" not in table:
        raise ConfigError(file, f"models.{name}.model", "required: the provider's model id")
    if table.get("baseUrl", table.get("base_url")) != table.get("base_url", table.get("baseUrl")):
        raise ConfigError(
            file, f"models.{name}.baseUrl", "set either baseUrl or base_url, not two different URLs"
        )
    if "pricing" in values:
        values["pricing"] = parse_pricing(values["pricing"])
    return ModelConfig(name=name, extra=extra, **values)


def _attach_key(
    file: str,
    config: ModelConfig,
    table: dict[str, Any],
    provider: Any,
    key_lookup: KeyLookup,
    own_keys: Mapping[str, str],
) -> list[str]:
    """Set ``config.api_key`` from the credential store, else from the provider's ``key_env``
    variable; return the secrets to scrub from messages.

    ``credential`` names an instance of the provider's credential type (``"work"``) or, with a
    colon, another type and instance (``"openai_key:openrouter"``).
    """
    default_type = getattr(provider, "credential_type", None)
    ref = table.get("credential", "default")
    if not isinstance(ref, str) or not ref:
        raise ConfigError(
            file, f"models.{config.name}.credential", 'expected "instance" or "type:instance"'
        )
    cred_type, _, instance = ref.rpartition(":")
    cred_type = cred_type or default_type
    if cred_type is None:
        return []
    instance = own_keys.get(cred_type, instance)
    values = key_lookup(cred_type, instance or "default") or {}
    env_name = getattr(provider, "key_env", None)
    config.api_key = values.get("token") or (os.environ.get(env_name) if env_name else None) or None
    if config.api_key is None and getattr(provider, "key_required", True):
        where = cred_type if instance == "default" else f"{cred_type}:{instance}"
        raise AuthError(
            f"model {config.name!r} needs a {where} credential and none is stored; "
            f"add it with `al creds add {where}`"
        )
    return [config.api_key] if config.api_key else []


# --------------------------------------------------------------------------- the chain


def retry_base_delay() -> float:
    try:
        return max(0.0, float(os.environ.get("AL_RETRY_BASE_DELAY", "1.0")))
    except ValueError:
        return 1.0


class ModelChain:
    """An agent's models, tried in order. See the module docstring for the policy.

    ``sleep`` and ``breaker`` are injectable: a session passes ``cancel_event.wait``, so a
    killed run wakes at once (a sleep returning True stops the retries and raises the error in
    hand, without falling back); tests pass a breaker with a fake clock.
    """

    def __init__(
        self,
        project: Any,
        agent: Any,
        registry: Any,
        key_lookup: KeyLookup,
        on_event: OnEvent,
        *,
        breaker: CircuitBreaker | None = None,
        sleep: Callable[[float], Any] = time.sleep,
    ):
        names = agent.config.get("models")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ConfigError(
                str(agent.config_file),
                "models",
                'expected a list of [models.<name>] names from config.toml, e.g. ["sonnet"]',
            )
        defined = _model_tables(project)
        for name in names:
            if name not in defined:
                known = ", ".join(sorted(defined)) or "none defined"
                raise ConfigError(
                    str(agent.config_file),
                    "models",
                    f"unknown model {name!r}{_close(name, defined)}; "
                    f"[models.<name>] tables in {project.config_file}: {known}",
                )
        # The credentials an agent lists, type -> instance: its own model keys among them.
        own_keys = {}
        for ref in agent.credentials:
            kind, _, instance = ref.strip().partition(":")
            own_keys[kind] = instance or "default"
        self.entries = [
            resolve_model(project, name, registry, key_lookup, own_keys) for name in names
        ]
        self.on_event = on_event
        self.breaker = breaker or BREAKER
        self.sleep = sleep

    @property
    def models(self) -> list[ModelConfig]:
        return [entry.config for entry in self.entries]

    def complete(
        self, messages: list[Message], tools: list[ToolSpec], options: dict[str, Any]
    ) -> Reply:
        """One model turn through the chain; raises the last ProviderError when all fail."""
        open_ = [e for e in self.entries if self.breaker.is_open(e.config.name)]
        # When every model is tripped, asking them beats failing without a try.
        entries = [e for e in self.entries if e not in open_] or self.entries
        if entries is not self.entries:
            for entry in open_:
                self._problem(entry, None, "skip", 0, 0.0)
        last: ProviderError | None = None
        for entry in entries:
            try:
                return _cleaned(self._with_retries(entry, messages, tools, options))
            except _Stopped as stopped:
                raise stopped.error from None
            except (RateLimited, Transient) as exc:
                last = exc
                self.breaker.trip(entry.config.name)
        assert last is not None
        raise _all_failed(last, [e.config.name for e in entries])

    def _with_retries(
        self,
        entry: ModelEntry,
        messages: list[Message],
        tools: list[ToolSpec],
        options: dict[str, Any],
    ) -> Reply:
        base = retry_base_delay()
        attempt = 0
        while True:
            try:
                reply = self._attempt(entry, messages, tools, options)
            except (RateLimited, Transient) as exc:
                if isinstance(exc, Unavailable) or attempt == MAX_RETRIES:
                    self._problem(entry, exc, "fallback", attempt, 0.0)
                    raise
                retry_after = getattr(exc, "retry_after", None)
                delay = min(MAX_DELAY, base * 2**attempt if retry_after is None else retry_after)
                self._problem(entry, exc, "retry", attempt, delay)
                if self.sleep(delay):
                    raise _Stopped(exc) from None
                attempt += 1
                continue
            self.breaker.reset(entry.config.name)
            return reply

    def _attempt(
        self,
        entry: ModelEntry,
        messages: list[Message],
        tools: list[ToolSpec],
        options: dict[str, Any],
    ) -> Reply:
        started = time.monotonic()
        reply: Reply | None = None
        error: BaseException | None = None
        try:
            reply = entry.provider.complete(messages, tools, entry.config, options)
            refused = checked(reply, messages, tools)
            if refused:
                self._refused_usage(entry, refused, reply.usage)
            return reply
        except LlamaherdError as exc:
            error = exc
            raise
        except Exception as exc:  # a provider bug must still end as a clear, key-free error
            error = Fatal(f"{entry.provider.name}: internal error ({type(exc).__name__})")
            raise error from exc
        finally:
            usage = reply.usage if reply is not None else Usage()
            if reply is not None:
                usage.cost_usd = self._cost(entry, usage)
            self.on_event(
                "model_call",
                {
                    "model": entry.config.name,
                    "provider": entry.provider.name,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cached_input_tokens": usage.cached_input_tokens,
                    "cost_usd": usage.cost_usd if reply is not None else 0.0,
                    "ok": error is None,
                    "error_class": type(error).__name__ if error else None,
                },
            )

    def _refused_usage(self, entry: ModelEntry, refused: list[str], counted: Usage) -> None:
        """A reply whose usage cannot be right (``llamaherd.usage``): said in the log and as a
        ``usage_refused`` event, with what was counted instead."""
        data = {
            "model": entry.config.name, "provider": entry.provider.name, "refused": refused,
            "input_tokens": counted.input_tokens, "output_tokens": counted.output_tokens,
            "message": f"{entry.provider.name} reported usage that cannot be right "
            f"({', '.join(refused)}): counted as {counted.input_tokens:,} in / "
            f"{counted.output_tokens:,} out tokens, the size of the call",
        }  # fmt: skip
        log.warning("model %s: %s", entry.config.name, data["message"])
        self.on_event("usage_refused", data)

    @staticmethod
    def _cost(entry: ModelEntry, usage: Usage) -> float | None:
        prices = getattr(entry.provider, "prices", None) or {}
        return call_cost(usage, entry.config.pricing, prices, entry.config.model)

    def _problem(
        self, entry: ModelEntry, exc: ProviderError | None, action: str, attempt: int, delay: float
    ) -> None:
        message = str(exc) if exc else f"model failed within the last {self.breaker.seconds:g} s"
        self.on_event(
            "provider_error",
            {
                "model": entry.config.name,
                "provider": entry.provider.name,
                "error_class": type(exc).__name__ if exc else "CircuitOpen",
                "message": scrub(message, entry.secrets),
                "attempt": attempt + 1,
                "action": action,  # retry | fallback | skip
                "delay_s": round(delay, 3),
            },
        )


class _Stopped(Exception):
    """The wait between retries was cut short: the run is being cancelled."""

    def __init__(self, error: ProviderError):
        self.error = error


def _all_failed(last: ProviderError, names: list[str]) -> ProviderError:
    message = f"all models failed ({', '.join(names)}); last: {last}"
    if isinstance(last, RateLimited):
        return RateLimited(message, retry_after=last.retry_after)
    return type(last)(message)


def _cleaned(reply: Reply) -> Reply:
    """``reply`` with lone UTF-16 surrogates in its text and tool calls made U+FFFD and
    numbers that are not finite None: a model may emit ``"\\ud800"`` or ``NaN`` in its JSON,
    and stored, either broke every listing that showed it."""
    from llamaherd.inbound import clean

    reply.text = clean(reply.text)
    for call in reply.tool_calls:
        call.name, call.arguments = clean(call.name), clean(call.arguments)
    return reply

"""One JSON Schema for each config file, assembled from core and every registered plugin.

Core owns the keys of DESIGN §3. Plugins extend them through the ``schema`` fragment of the
objects they register:

- a trigger type's fragment adds top-level keys to an agent's ``config.toml``
  (cron: ``schedule``; webhooks: ``[[webhooks]]``);
- a runtime's fragment is the variant of the agent's ``[runtime]`` table whose ``type`` is its name;
- a provider's fragment adds keys to a project ``[models.<name>]`` table whose ``provider`` is its
  name;
- a webhook source's fragment adds keys to a project ``[webhooks.<name>]`` table by ``type``.

A fragment is a JSON Schema object (``{"type": "object", "properties": {...}}``); a bare
``{key: schema}`` map of properties is accepted too.

Checks a schema cannot express belong to the plugin: a runtime may define
``validate(agent, project)`` (docker: is the daemon up?) and a trigger type ``validate(agent)``
(cron: does the expression parse?). Each returns a list of ConfigErrors, ConfigWarnings or
messages (a message starting ``warning:`` is a warning); ``al validate`` prints them with
everything else.

``al schema`` prints the documents built here (draft 2020-12, tagged tables expressed with
``if``/``then`` and ``unevaluatedProperties``). Validation does the tag dispatch itself with one
compiled validator per variant: that is faster than ``unevaluatedProperties`` and lets every error
name the plugin to install when a tag is unknown.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import getpass
import json
import os
import re
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from llamaherd import compat, schedlog
from llamaherd.budgets import budget_schema
from llamaherd.errors import ConfigError, ConfigWarning, LlamaherdError
from llamaherd.flow import FLOW_SCHEMA
from llamaherd.models import THINKING_LEVELS
from llamaherd.plugins import PROVIDED_BY
from llamaherd.project import (
    DEFAULTS,
    GATEWAY_DEFAULTS,
    LOCAL_DEFAULTS,
    RUN_TIMEOUT,
    WAIT_TIMEOUT,
    Agent,
    Project,
)
from llamaherd.types import fragment

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFAULT_RUNTIME = "container"

# --------------------------------------------------------------------------- core's parts


def _int(description: str, minimum: int = 0, default: Any = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum, "description": description}
    if default is not None:
        schema["default"] = default
    return schema


def _seconds(description: str, default: Any = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0, "description": description}
    if default is not None:
        schema["default"] = default
    return schema


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def _table(properties: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }


MODEL_KEYS: dict[str, Any] = {
    "provider": {"type": "string", "description": "Provider plugin that serves this model."},
    "model": {"type": "string", "minLength": 1, "description": "Model id sent to the provider."},
    "authType": {
        "enum": list(compat.AUTH_TYPES),
        "description": 'How the provider authenticates: "api_key" (the default), "oauth_token" '
        '(anthropic: a `claude setup-token` token) or "pi_auth" (Action Llama\'s pi login: '
        "read as api_key, with a warning).",
    },
    "thinkingLevel": {
        "enum": list(THINKING_LEVELS),
        "description": "Thinking/reasoning effort; each provider sends it as its API's setting "
        "(a thinking budget, `reasoning_effort`, ...). Unset: the model's default.",
    },
    "base_url": {
        "type": "string",
        "pattern": "^https?://",
        "description": "API base URL (proxies, compatible servers); default: the provider's.",
    },
    "baseUrl": {
        "type": "string",
        "pattern": "^https?://",
        "description": "Action Llama's spelling of `base_url`.",
    },
    "max_tokens": _int("Maximum output tokens per model turn.", minimum=1),
    "temperature": {
        "type": "number",
        "minimum": 0,
        "maximum": 2,
        "description": "Sampling temperature.",
    },
    "credential": {
        "type": "string",
        "default": "default",
        "description": 'Key credential: an instance of the provider\'s credential type ("work") or "type:instance".',
    },
    "pricing": {
        "type": "object",
        "description": "USD per million tokens, for the `cost_usd` of each call; overrides the "
        "provider's price table and the cost its API reports. E.g. "
        "`pricing = { input = 3.0, output = 15.0, cached_input = 0.3 }`.",
        "properties": {
            "input": {"type": "number", "minimum": 0, "description": "Prompt tokens."},
            "output": {"type": "number", "minimum": 0, "description": "Output tokens."},
            "cached_input": {
                "type": "number",
                "minimum": 0,
                "description": "Prompt tokens read from the prompt cache (default: `input`).",
            },
            "cache_write": {
                "type": "number",
                "minimum": 0,
                "description": "Prompt tokens written to the prompt cache (default: `input`).",
            },
        },
        "required": ["input", "output"],
        "additionalProperties": False,
    },
}

MODEL_REQUIRED = ["provider", "model"]

WEBHOOK_SOURCE_KEYS: dict[str, Any] = {
    "type": {"type": "string", "description": 'Webhook source type, e.g. "github".'},
    "credential": {
        "type": "string",
        "default": "default",
        "description": "Instance of the source's secret credential used to check signatures.",
    },
    "allowUnsigned": {
        "type": "boolean",
        "default": False,
        "description": "Accept deliveries without a valid signature (never on a public address).",
    },
    "maxBodyBytes": {
        "type": "integer",
        "minimum": 1,
        "default": 1048576,
        "description": "Larger deliveries are refused with 413.",
    },
}

RUNTIME_KEYS: dict[str, Any] = {
    "type": {
        "type": "string",
        "default": DEFAULT_RUNTIME,
        "description": 'Where tool calls execute: "container" (llamaherd-docker) or "host-user".',
    },
}

PROJECT_KEYS: dict[str, Any] = {
    "models": {
        "type": "object",
        "description": "Named models; agents list them by name in `models`.",
        "additionalProperties": {"type": "object"},
    },
    "local": _table(
        {
            "image": {
                "type": "string",
                "default": LOCAL_DEFAULTS["image"],
                "description": "Container image for agents.",
            },
            "memory": {
                "type": "string",
                "pattern": "^[0-9]+(\\.[0-9]+)?[bkmgBKMG]?$",
                "default": LOCAL_DEFAULTS["memory"],
                "description": 'Memory limit per sandbox, e.g. "4g".',
            },
            "cpus": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": LOCAL_DEFAULTS["cpus"],
                "description": "CPU limit per sandbox.",
            },
            "timeout": _seconds("Default run timeout in seconds.", LOCAL_DEFAULTS["timeout"]),
            **compat.LOCAL_KEYS,
        },
        "Local sandbox defaults.",
    ),
    "gateway": _table(
        {
            "port": {
                "type": "integer",
                "minimum": 0,
                "maximum": 65535,
                "default": GATEWAY_DEFAULTS["port"],
                "description": "HTTP port of the scheduler's server.",
            },
            "bind": {
                "type": "string",
                "default": GATEWAY_DEFAULTS["bind"],
                "description": "Address the server listens on.",
            },
            "maxConnections": {
                "type": "integer",
                "minimum": 1,
                "default": GATEWAY_DEFAULTS["maxConnections"],
                "description": "Open connections the server holds (TCP and the unix socket each); "
                "beyond it the connection idle longest is closed.",
            },
            "headerTimeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": GATEWAY_DEFAULTS["headerTimeout"],
                "description": "Seconds a client has to send a request's headers (else 408).",
            },
            "bodyTimeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": GATEWAY_DEFAULTS["bodyTimeout"],
                "description": "Seconds a client has to send a request's body once its headers "
                "are in (else 408).",
            },
            "bodyBudget": {
                "type": "integer",
                "minimum": 65536,
                "default": GATEWAY_DEFAULTS["bodyBudget"],
                "description": "Bytes of request bodies the server holds at once (one credential, "
                "such as a run's token, an eighth of them); a body beyond is answered 503 (429) "
                "with Retry-After.",
            },
            "url": {
                "type": "string",
                "pattern": "^https?://",
                "description": "Public URL senders reach the server at (behind a proxy or "
                "tunnel): `al start` prints the webhook URLs under it.",
            },
        },
        "The scheduler's HTTP server (gateway API, webhooks, control API, dashboard).",
    ),
    "log": _table(
        {
            "format": {
                "type": "string",
                "enum": list(schedlog.FORMATS),
                "default": schedlog.DEFAULTS["format"],
                "description": "Format of the scheduler's log (`.al/scheduler.log`, and stderr "
                'in the foreground): "text" for people, "json" for one JSON object a line '
                "(time, at, level, logger, message) for a log shipper. `$AL_LOG_FORMAT` wins.",
            },
            "level": {
                "type": "string",
                "enum": list(schedlog.LEVELS),
                "default": schedlog.DEFAULTS["level"],
                "description": "Least severe level the scheduler logs. `$AL_LOG_LEVEL` wins.",
            },
            "maxBytes": {
                "type": "integer",
                "minimum": 0,
                "default": schedlog.ROTATION["maxBytes"],
                "description": "Size at which `.al/scheduler.log` is rotated to "
                "`scheduler.log.1` (the older ones shifted to `.2`, ...). 0: never rotated by "
                "the scheduler, but reopened when moved away, for logrotate (no "
                "`copytruncate` needed).",
            },
            "backups": {
                "type": "integer",
                "minimum": 0,
                "default": schedlog.ROTATION["backups"],
                "description": "Rotated files kept (`scheduler.log.1` ... `.N`); older ones are "
                "deleted.",
            },
        },
        "The scheduler's log: run starts and ends, webhook receipts, triggers refused.",
    ),
    "webhooks": {
        "type": "object",
        "description": "Named webhook sources; agents refer to them in `[[webhooks]] source`.",
        "additionalProperties": {"type": "object"},
    },
    "maxReruns": _int(
        "Reruns a scheduled run may request with `al-rerun`.", default=DEFAULTS["maxReruns"]
    ),
    "maxCallDepth": _int("How deep agents may call agents.", default=DEFAULTS["maxCallDepth"]),
    "workQueueSize": _int(
        "Queued work items per agent before new ones are dropped.", 1, DEFAULTS["workQueueSize"]
    ),
    "scale": _int("Project-wide cap on concurrent runs (default unlimited)."),
    "resourceLockTimeout": _seconds(
        "Seconds before an unrefreshed resource lock expires.", DEFAULTS["resourceLockTimeout"]
    ),
    "defaultWaitTimeout": _seconds(
        "Default `wait_for_trigger` timeout in seconds.", DEFAULTS["defaultWaitTimeout"]
    ),
    "historyRetentionDays": _int(
        "Days finished runs (with their events), agent events, finished calls and plugins' "
        "rows such as webhook deliveries and dead letters are kept; the scheduler deletes "
        "older ones every hour.",
        default=DEFAULTS["historyRetentionDays"],
    ),
    "timezone": {
        "type": "string",
        "default": DEFAULTS["timezone"],
        "description": 'The project\'s time zone (IANA name, e.g. "Europe/Berlin"): where '
        "the days and months of `[budget]` begin.",
    },
    "budget": budget_schema("project"),
    "database": {
        "type": "string",
        "default": DEFAULTS["database"],
        "description": "Database URL (peewee): sqlite:///path or postgresql://... ($AL_DATABASE_URL wins).",
    },
    **compat.PROJECT_KEYS,
}

AGENT_KEYS: dict[str, Any] = {
    "source": {
        "type": "string",
        "description": "Where `al add` got this skill (folder or git URL).",
    },
    "models": {
        **_strings(
            "Names of `[models.*]` in the project config: first primary, the rest fallbacks."
        ),
        "minItems": 1,
        "uniqueItems": True,
    },
    "credentials": {
        **_strings('Credentials staged into each run: "type" or "type:instance".'),
        "uniqueItems": True,
    },
    "hooks": _table(
        {
            "pre": _strings("Shell commands run in the sandbox before the session, in order."),
            "post": _strings("Shell commands run in the sandbox after the session, in order."),
        },
        "Shell commands (`/bin/sh -c`, 5 min each): a failing `pre` command ends the run as an "
        "error with its output; a failing `post` command is logged.",
    ),
    "params": {"type": "object", "description": "Free-form parameters given to the agent."},
    "scale": _int(
        "Concurrent runs of this agent (0 disables it); default: the project's "
        "`defaultAgentScale`, else 1."
    ),
    "timeout": _seconds(f"Run timeout in seconds (default `[local].timeout`, then {RUN_TIMEOUT})."),
    "maxWorkQueueSize": _int("Queued work items for this agent (default `workQueueSize`).", 1),
    "maxReruns": _int("Reruns a scheduled run may request (default project `maxReruns`)."),
    "waitTimeout": _seconds(
        f"`wait_for_trigger` timeout (default `defaultWaitTimeout`, then {WAIT_TIMEOUT})."
    ),
    "runtime": {"type": "object", "description": "Where the agent's tool calls execute."},
    "maxTurns": _int(
        "Model turns after which a run is suspended and the owner asked to approve more "
        "(`al approve RUN` / `al deny RUN`). Unset: a safety cap of 100 turns ends the run as "
        "an error instead.",
        1,
    ),
    "suspendTimeout": _seconds(
        "Seconds a suspended run waits for `al approve`; after that (or on `al deny`) the run "
        "is killed and the agent turned `off`.",
        1200,
    ),
    "onInterrupted": {
        "enum": ["requeue", "fail"],
        "default": "requeue",
        "description": "What happens to a run that was active when the scheduler died "
        "(or was still active when `al stop`'s grace period ended).",
    },
    "loop_mode": {
        "enum": ["autonomous", "interactive"],
        "default": "autonomous",
        "description": "autonomous: nobody answers during a run (the model reports with `say` "
        "and `respond`); interactive: a human takes part, `respond` ends the turn and `ask` "
        "waits for `al reply` (`al chat` is always interactive).",
    },
    "selfStates": {
        "type": "array",
        "items": {"enum": ["idle", "hibernate", "off"]},
        "uniqueItems": True,
        "default": ["idle", "hibernate", "off"],
        "description": "States the agent may set itself (`set_state`, `state`, `al-state`); "
        "`[]` forbids it (the `state` command then exits 126).",
    },
    "flow": FLOW_SCHEMA,
    "budget": budget_schema("agent"),
    **compat.AGENT_KEYS,
}

# --------------------------------------------------------------------------- assembly


def _variant(
    base: dict[str, Any], obj: Any, description: str, required: Iterable[str]
) -> dict[str, Any]:
    """A closed table: the base keys plus one plugin's fragment."""
    properties, extra = fragment(obj)
    schema = _table({**base, **properties}, description)
    if [*required, *extra]:
        schema["required"] = [*required, *extra]
    return schema


def _variants(
    base: dict[str, Any], objects: dict[str, Any], what: str, required: Iterable[str] = ()
) -> dict[str, Draft202012Validator]:
    """One compiled validator per registered object: ``{name: validator}``."""
    return {
        name: Draft202012Validator(_variant(base, obj, f"{what} {name}", required))
        for name, obj in objects.items()
    }


def _tagged(
    base: dict[str, Any], tag: str, objects: dict[str, Any], description: str, default: str | None
) -> dict[str, Any]:
    """The documented form of a tagged table: ``if tag == name then <fragment>`` per object."""
    properties = copy.deepcopy(base)
    properties[tag] = {**properties[tag], "enum": sorted(objects)}
    branches = []
    for name in sorted(objects):
        extra, required = fragment(objects[name])
        condition: dict[str, Any] = {"properties": {tag: {"const": name}}}
        if name != default:  # the default variant also applies when the tag is absent
            condition["required"] = [tag]
        then: dict[str, Any] = {"properties": extra}
        if required:
            then["required"] = required
        branches.append({"if": condition, "then": then})
    schema: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": properties,
        "unevaluatedProperties": False,
    }
    if branches:
        schema["allOf"] = branches
    return schema


def _document(title: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": DIALECT,
        "title": title,
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


class _SourceKeys:
    """A webhook source's table keys: its fragment, and the instance of its credential type
    under that type's name (Action Llama's spelling of ``credential``: ``x_twitter_api =
    "bot"``)."""

    def __init__(self, source: Any):
        properties, required = fragment(source)
        ctype = getattr(source, "credential_type", None)
        if ctype:
            properties.setdefault(
                ctype,
                {"type": "string", "description": f"Instance of {ctype} (as `credential`)."},
            )
        self.schema = {"type": "object", "properties": properties, "required": required}


class Schemas:
    """The assembled schemas of one registry, with validators compiled once."""

    def __init__(self, registry: Any):
        self.registry = registry
        self.agent_keys = dict(AGENT_KEYS)
        for trigger in registry.trigger_types.values():
            for key, schema in fragment(trigger)[0].items():
                self.agent_keys.setdefault(key, schema)
        self.agent_base = Draft202012Validator(_document("agent config.toml", self.agent_keys))
        # A plugin that acts on a key owns its schema (core's may only accept it).
        self.project_keys = dict(PROJECT_KEYS)
        for name, key in registry.project_keys.items():
            self.project_keys[name] = {"description": key.description, **key.schema}
        self.project_base = Draft202012Validator(
            _document("project config.toml", self.project_keys)
        )
        self.runtimes = _variants(RUNTIME_KEYS, registry.runtimes, "[runtime]")
        self.models = _variants(MODEL_KEYS, registry.providers, "model", MODEL_REQUIRED)
        self.sources = {name: _SourceKeys(obj) for name, obj in registry.webhook_sources.items()}
        self.webhook_sources = _variants(WEBHOOK_SOURCE_KEYS, self.sources, "webhook source")

    def project_schema(self) -> dict[str, Any]:
        """The project ``config.toml`` schema as documented by ``al schema --project``."""
        registry = self.registry
        properties = copy.deepcopy(self.project_keys)
        model = _tagged(MODEL_KEYS, "provider", registry.providers, "A model.", None)
        model["required"] = MODEL_REQUIRED
        properties["models"]["additionalProperties"] = model
        properties["webhooks"]["additionalProperties"] = _tagged(
            WEBHOOK_SOURCE_KEYS, "type", self.sources, "A webhook source.", None
        )
        return _document("llamaherd project config.toml", properties)

    def agent_schema(self) -> dict[str, Any]:
        """The agent ``config.toml`` schema as documented by ``al schema --agent``."""
        properties = copy.deepcopy(self.agent_keys)
        # Credential types have no config keys; list them so the docs show what can be declared.
        properties["credentials"]["items"]["examples"] = sorted(self.registry.credential_types)
        properties["runtime"] = _tagged(
            RUNTIME_KEYS,
            "type",
            self.registry.runtimes,
            AGENT_KEYS["runtime"]["description"],
            DEFAULT_RUNTIME,
        )
        return _document("llamaherd agent config.toml", properties)


_CACHE: weakref.WeakKeyDictionary[Any, Schemas] = weakref.WeakKeyDictionary()


@functools.cache
def _foreign_validator(name: str) -> Draft202012Validator:
    """The ``[runtime]`` table of an Action Llama runtime no plugin provides."""
    return Draft202012Validator(_table(compat.FOREIGN_RUNTIMES[name], f"[runtime] {name}"))


def schemas(registry: Any) -> Schemas:
    """The (cached) assembled schemas of ``registry``."""
    found = _CACHE.get(registry)
    if found is None:
        found = _CACHE[registry] = Schemas(registry)
    return found


def project_schema(registry: Any) -> dict[str, Any]:
    return schemas(registry).project_schema()


def agent_schema(registry: Any) -> dict[str, Any]:
    return schemas(registry).agent_schema()


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class Problem:
    """One line of ``al validate``: file (relative to the project root), dotted key, message."""

    file: str
    key: str
    message: str
    severity: str = "error"  # or "warning"
    agent: str | None = None
    # A key Action Llama accepts that llamaherd reads differently or does not act on (these
    # warnings are errors with `al doctor --strict`).
    compat: bool = False

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}: " if self.key else f"{self.file}: "
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{where}{self.message}"


_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "a table",
    "null": "nothing",
}


def _describe(value: Any) -> str:
    """A value as the user wrote it in TOML, for "got ..." messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


def did_you_mean(value: Any, choices: Iterable[str]) -> str:
    """`` (did you mean "x"?)`` when ``value`` is close to one of ``choices``, else ``""``."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def one_of(choices: Iterable[str]) -> str:
    names = sorted(choices)
    return "one of " + ", ".join(f'"{n}"' for n in names) if names else "nothing (none installed)"


def _join(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parts(key: str) -> list[Any]:
    """``_join``'s inverse: ``"webhooks[0].source"`` -> ``["webhooks", 0, "source"]``."""
    return [
        int(index) if index else name for index, name in re.findall(r"\[(\d+)\]|([^.\[]+)", key)
    ]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _messages(error: ValidationError) -> Iterator[tuple[list[Any], str]]:
    """(relative key path, message) pairs for one jsonschema error."""
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind in ("additionalProperties", "unevaluatedProperties"):
        properties = error.schema.get("properties", {})
        # Deprecated spellings stay accepted but are never suggested.
        known = [k for k, v in properties.items() if not v.get("deprecated")]
        for key in value:
            if key not in properties:
                hint = did_you_mean(key, known) or f" (known keys: {', '.join(sorted(known))})"
                yield [key], f"unknown key{hint}"
    elif kind == "required":
        for key in expected:
            if key not in value:
                yield [key], "missing (required)"
    elif kind == "type":
        names = _as_list(expected)
        wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
        yield [], f"expected {wanted}, got {_describe(value)}"
    elif kind in ("anyOf", "oneOf") and all("type" in option for option in expected):
        names = [n for option in expected for n in _as_list(option["type"])]
        wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in dict.fromkeys(names))
        yield [], f"expected {wanted}, got {_describe(value)}"
    elif kind == "not" and "x-removed" in error.schema:  # a key retired with its reason
        yield [], error.schema["x-removed"]
    elif kind == "enum":
        yield (
            [],
            f"expected {one_of(expected)}, got {_describe(value)}{did_you_mean(value, expected)}",
        )
    else:
        yield [], _BOUNDS.get(kind, lambda e: e.message)(error)


_BOUNDS = {
    "minimum": lambda e: f"expected a number >= {e.validator_value}, got {_describe(e.instance)}",
    "exclusiveMinimum": lambda e: (
        f"expected a number > {e.validator_value}, got {_describe(e.instance)}"
    ),
    "maximum": lambda e: f"expected a number <= {e.validator_value}, got {_describe(e.instance)}",
    "exclusiveMaximum": lambda e: (
        f"expected a number < {e.validator_value}, got {_describe(e.instance)}"
    ),
    "minLength": lambda e: "expected a non-empty string",
    "minItems": lambda e: f"expected at least {e.validator_value} item(s)",
    "uniqueItems": lambda e: "expected unique items",
    "pattern": lambda e: (
        f"expected a string matching {e.validator_value}, got {_describe(e.instance)}"
    ),
    "const": lambda e: f"expected {_describe(e.validator_value)}, got {_describe(e.instance)}",
}


def errors_of(validator: Draft202012Validator, instance: Any) -> Iterator[tuple[list[Any], str]]:
    """(key path, message) of every error of ``instance`` against ``validator``, worded as
    ``al validate`` words them (an unknown key with a did-you-mean, "expected ..., got ...")."""
    for error in validator.iter_errors(instance):
        for path, message in _messages(error):
            yield [*error.absolute_path, *path], message


def dotted(path: Iterable[Any]) -> str:
    """A key path as the messages write it: ``webhooks[0].source``."""
    return _join(path)


# --------------------------------------------------------------------------- validation


def missing_plugin(kind: str, name: str, label: str) -> str | None:
    """``<label> needs the <dist> plugin`` when a first-party distribution provides ``name``."""
    from llamaherd.install import needs

    dist = PROVIDED_BY.get((kind, name))
    return None if dist is None else f"{label} {needs(dist)}"


class _Checker:
    """Collects the problems of one project; skips schema errors under keys already reported."""

    def __init__(self, project: Project, registry: Any):
        self.project = project
        self.registry = registry
        self.schemas = schemas(registry)
        self.problems: list[Problem] = []
        from llamaherd.credentials import CredentialStore

        self.store = CredentialStore()

    def shared_files(self) -> None:
        """The project's ``shared/`` directory: files left out (warnings), too much (error)."""
        from llamaherd.shared_dir import SHARED_DIR, shared_files

        try:
            _, skipped = shared_files(self.project.root)
        except LlamaherdError as exc:
            self.add(f"{SHARED_DIR}/", "", str(exc).removeprefix(f"{SHARED_DIR}/: "))
            return
        for note in skipped:
            self.add(f"{SHARED_DIR}/", "", note, warning=True)

    def add(
        self,
        file: str,
        key: str,
        message: str,
        *,
        agent: str | None = None,
        warning: bool = False,
        compat: bool = False,
    ) -> None:
        severity = "warning" if warning else "error"
        self.problems.append(Problem(file, key, message, severity, agent, compat))

    def schema_errors(
        self,
        validator: Draft202012Validator,
        instance: Any,
        file: str,
        prefix: list[Any],
        agent: str | None = None,
        skip: Collection[str] = (),
    ) -> None:
        for path, message in errors_of(validator, instance):
            full = [*prefix, *path]
            if full[:1] and full[0] in skip:
                continue
            self.add(file, _join(full), message, agent=agent)

    # ----------------------------------------------------------------- tagged tables

    def tagged(
        self,
        table: Any,
        tag: str,
        variants: dict[str, Draft202012Validator],
        kind: str,
        what: str,
        file: str,
        prefix: list[Any],
        agent: str | None = None,
        default: str | None = None,
    ) -> str | None:
        """Validate a tagged table against its variant; return the tag when it is installed."""
        if not isinstance(table, dict):
            return None  # the base schema reports it
        name = table.get(tag, default)
        key = _join([*prefix, tag])
        if name is None:
            self.add(file, key, "missing (required)", agent=agent)
            return None
        if not isinstance(name, str):
            self.add(file, key, f"expected a string, got {_describe(name)}", agent=agent)
            return None
        if name not in variants:
            if self.foreign(table, kind, name, file, prefix, agent):
                return None
            label = f'{what} "{name}"' + ("" if tag in table else " (the default)")
            hint = missing_plugin(kind, name, label)
            known = set(variants) | {n for (k, n) in PROVIDED_BY if k == kind}
            self.add(
                file,
                key,
                hint
                or f"expected {one_of(variants)}, got {_describe(name)}{did_you_mean(name, known)}",
                agent=agent,
            )
            return None
        self.schema_errors(variants[name], table, file, prefix, agent)
        return name

    def foreign(
        self,
        table: dict[str, Any],
        kind: str,
        name: str,
        file: str,
        prefix: list[Any],
        agent: str | None,
    ) -> bool:
        """An Action Llama runtime no installed plugin provides (``compat.FOREIGN_RUNTIMES``):
        its keys are still checked, and the error says what is missing. False for other tags."""
        if kind != "runtimes" or name not in compat.FOREIGN_RUNTIMES:
            return False
        self.schema_errors(_foreign_validator(name), table, file, prefix, agent)
        self.add(file, _join([*prefix, "type"]), compat.foreign_runtime_message(name), agent=agent)
        return True

    def notes(self, file: str, notes: Iterable[compat.Note], agent: str | None = None) -> None:
        for key, message in notes:
            self.add(file, key, message, agent=agent, warning=True, compat=True)

    # ----------------------------------------------------------------- project

    def check_project(self) -> None:
        config = self.project.config
        file = "config.toml"
        first = len(self.problems)
        self.schema_errors(self.schemas.project_base, config, file, [])
        self.project_budget(file, config)
        # A key an installed plugin acts on ([telemetry] with llamaherd-otel) is not "not acted on".
        owned = set(self.registry.project_keys)
        self.notes(file, [n for n in compat.project_notes(config) if n[0] not in owned])
        self.shared_files()
        overflow = self.project.scale_overflow()
        if overflow:
            self.add(
                file,
                "scale",
                f"agents' scales add up to {overflow[0]}, above the project's scale "
                f"{overflow[1]}: agents will be throttled (at most {overflow[1]} runs at once)",
                warning=True,
            )
        used = {
            m for agent in self.project.agents.values() for m in _names(agent.config.get("models"))
        }
        for name, model in _tables(config.get("models")):
            provider = self.tagged(
                model,
                "provider",
                self.schemas.models,
                "providers",
                "provider",
                file,
                ["models", name],
            )
            if provider:
                self.provider_checks(name, model, self.registry.providers[provider])
            if provider and name in used:
                self.model_key(name, model, self.registry.providers[provider])
        for name, source in _tables(config.get("webhooks")):
            kind = self.tagged(
                source,
                "type",
                self.schemas.webhook_sources,
                "webhook_sources",
                "webhook source",
                file,
                ["webhooks", name],
            )
            if kind and not source.get("allowUnsigned", False):
                self.credential(
                    file,
                    ["webhooks", name],
                    self.registry.webhook_sources[kind],
                    source,
                )
        self.in_layers(first)

    def in_layers(self, first: int) -> None:
        """Problems (from ``first`` on) of keys that ``.env.toml`` or the environment's file
        set name that file, not config.toml (``llamaherd.environments``)."""
        layering = self.project.layering
        if layering is None or not layering.layers:
            return
        for i in range(first, len(self.problems)):
            problem = self.problems[i]
            origin = layering.origin(_parts(problem.key)) if problem.key else None
            if problem.file == "config.toml" and origin is not None:
                self.problems[i] = dataclasses.replace(problem, file=origin)

    def project_budget(self, file: str, config: dict[str, Any]) -> None:
        """The project's ``timezone`` names a zone, its ``[budget]`` parses."""
        from llamaherd.budgets import parse_budget, zone

        reported = {p.key.split(".")[0] for p in self.problems if p.agent is None}
        if isinstance(config.get("timezone"), str) and "timezone" not in reported:
            try:
                zone(self.project)
            except ConfigError as exc:
                self.add(file, exc.key, exc.message)
        if "budget" in config and "budget" not in reported:
            try:
                parse_budget(file, config["budget"])
            except ConfigError as exc:
                self.add(file, exc.key, exc.message)

    def provider_checks(self, name: str, model: dict[str, Any], provider: Any) -> None:
        """The provider's own ``validate(model)``, once the table's values are sound."""
        from llamaherd.models import model_config, provider_problems

        try:
            config = model_config("config.toml", name, model)
        except ConfigError:
            return  # the schema reported it
        for problem in provider_problems(provider, config):
            self.add("config.toml", f"models.{name}", problem)

    def model_key(self, name: str, model: dict[str, Any], provider: Any) -> None:
        """A model some agent uses needs its key: in the store or in the provider's env var.

        ``credential`` is an instance of the provider's credential type or "type:instance"
        (as ``llamaherd.models`` resolves it).
        """
        ref = model.get("credential", "default")
        env = getattr(provider, "key_env", None)
        if not isinstance(ref, str) or not getattr(provider, "key_required", True):
            return
        ctype, _, instance = ref.rpartition(":")
        ctype = ctype or getattr(provider, "credential_type", None)
        if ctype and not (env and os.environ.get(env)):
            message = self.missing_credential(ctype, instance or "default")
            if message:
                hint = f" (or set ${env})" if env else ""
                self.add("config.toml", f"models.{name}", message + hint)

    def credential(self, file: str, path: list[Any], owner: Any, table: dict[str, Any]) -> None:
        """Check that the credential an object needs (``owner.credential_type``) is stored: the
        instance the table names under that type's name (Action Llama's spelling,
        ``x_twitter_api = "bot"``), else under ``credential``."""
        ctype = getattr(owner, "credential_type", None)
        instance = table.get(ctype) if isinstance(table.get(ctype), str) else None
        instance = instance or table.get("credential", "default")
        if ctype and isinstance(instance, str):
            message = self.missing_credential(ctype, instance)
            if message:
                self.add(file, _join(path), message)

    def missing_credential(self, ctype: str, instance: str) -> str | None:
        """Why ``ctype:instance`` cannot be used, or None when it is in the store."""
        try:
            if self.store.exists(ctype, instance):
                return None
        except LlamaherdError as exc:  # an unsafe name
            return str(exc)
        ref = f"{ctype}:{instance}"
        return f"credential {ref} not found; add it with `al creds add {ref}`"

    # ----------------------------------------------------------------- agents

    def check_agent(self, agent: Agent) -> None:
        file = self.project.relative(agent.config_file)
        config = agent.config
        skip = self.plugin_keys(agent, file)
        runtime = self.tagged(
            config.get("runtime", {}),
            "type",
            self.schemas.runtimes,
            "runtimes",
            "runtime",
            file,
            ["runtime"],
            agent.name,
            DEFAULT_RUNTIME,
        )
        self.schema_errors(self.schemas.agent_base, config, file, [], agent.name, skip)
        if runtime:
            self.runtime_checks(agent, file, self.registry.runtimes[runtime])
        self.trigger_checks(agent, file)
        self.agent_models(agent, file)
        self.agent_credentials(agent, file)
        self.agent_webhooks(agent, file)
        self.flow_and_budget(agent, file)
        self.frontmatter(agent)
        self.notes(file, compat.agent_notes(config), agent.name)
        for where, key, message in agent.notes:
            where = self.project.relative(Path(where))
            self.add(where, key, message, agent=agent.name, warning=True, compat=True)
        self.relocate(agent, file)

    def relocate(self, agent: Agent, file: str) -> None:
        """Problems of keys taken from the SKILL.md frontmatter name SKILL.md and the key's
        place there (``metadata.schedule``), not config.toml."""
        if not agent.origins:
            return
        skill = self.project.relative(agent.skill_file)
        for i, problem in enumerate(self.problems):
            root = re.split(r"[.\[]", problem.key)[0]
            if problem.agent == agent.name and problem.file == file and root in agent.origins:
                key = agent.origins[root] + problem.key[len(root) :]
                self.problems[i] = dataclasses.replace(problem, file=skill, key=key)

    def plugin_keys(self, agent: Agent, file: str) -> set[str]:
        """Report keys of first-party plugins that are not installed; return them."""
        found = set()
        for key in agent.config:
            if key in self.schemas.agent_keys:
                continue
            dist = PROVIDED_BY.get(("agent_keys", key))
            if dist:
                found.add(key)
                from llamaherd.install import needs

                self.add(file, key, needs(dist), agent=agent.name)
        return found

    def runtime_checks(self, agent: Agent, file: str, runtime: Any) -> None:
        table = agent.runtime
        if table["type"] == "host-user" and table.get("run_as") == getpass.getuser():
            self.add(
                file,
                "runtime.run_as",
                f'"{table["run_as"]}" is the current user: runs without isolation',
                agent=agent.name,
                warning=True,
            )
        check = getattr(runtime, "validate", None)
        if check is not None:
            self.plugin_check(
                agent, file, f'runtime "{runtime.name}"', "runtime", check, self.project
            )

    def trigger_checks(self, agent: Agent, file: str) -> None:
        """Let each trigger type check its own keys, in the same pass as the schema: what it
        finds under a key the schema already reported (or inside it) is left out, the rest
        reported (``schedule`` is checked while ``timezone = 5`` is an error too)."""
        reported = [p.key for p in self.problems if p.agent == agent.name]
        for trigger in self.registry.trigger_types.values():
            check = getattr(trigger, "validate", None)
            keys = set(fragment(trigger)[0])
            used = sorted(keys & set(agent.config))
            if check is not None and used:
                label = f'trigger type "{trigger.name}"'
                self.plugin_check(agent, file, label, used[0], check, reported=reported)

    def plugin_check(
        self,
        agent: Agent,
        file: str,
        label: str,
        key: str,
        check: Any,
        *args: Any,
        reported: Collection[str] = (),
    ) -> None:
        """Report what a plugin's ``validate(agent, ...)`` returns: ConfigErrors (a
        ConfigWarning is a warning), or messages (``"warning: ..."`` for warnings); but not
        what touches a key of ``reported`` (the schema said it already). A plugin that raises
        is reported, never propagated, unless the schema reported a key of this agent (the
        plugin likely tripped on that value)."""
        try:
            results = list(check(agent, *args) or [])
        except Exception as exc:
            if not reported:
                self.add(
                    file,
                    key,
                    f"{label} could not check this agent: {type(exc).__name__}: {exc}",
                    agent=agent.name,
                )
            return
        for item in results:
            if isinstance(item, ConfigError) and _touches(item.key, reported):
                continue
            if isinstance(item, ConfigError):
                where = self.project.relative(Path(item.file))
                warning = isinstance(item, ConfigWarning)
                self.add(where, item.key, item.message, agent=agent.name, warning=warning)
                continue
            text = str(item)
            warning = text.startswith("warning:")
            self.add(
                file, key, text.removeprefix("warning:").strip(), agent=agent.name, warning=warning
            )

    def agent_models(self, agent: Agent, file: str) -> None:
        models = agent.config.get("models")
        defined = _tables(self.project.config.get("models"))
        names = [name for name, _ in defined]
        if models is None:
            self.add(
                file,
                "models",
                f"missing: list the models this agent uses (defined: {', '.join(names) or 'none'})",
                agent=agent.name,
            )
            return
        for i, name in enumerate(models if isinstance(models, list) else []):
            if isinstance(name, str) and name not in names:
                self.add(
                    file,
                    f"models[{i}]",
                    f"no [models.{name}] in config.toml (defined: {', '.join(names) or 'none'}){did_you_mean(name, names)}",
                    agent=agent.name,
                )

    def agent_credentials(self, agent: Agent, file: str) -> None:
        from llamaherd.credentials import parse_ref

        refs = agent.config.get("credentials")
        types = self.registry.credential_types
        for i, ref in enumerate(refs if isinstance(refs, list) else []):
            key = f"credentials[{i}]"
            if not isinstance(ref, str):
                continue  # the schema reports it
            try:
                ctype, instance = parse_ref(ref)
            except LlamaherdError as exc:
                self.add(file, key, str(exc), agent=agent.name)
                continue
            if ctype not in types:
                known = set(types) | {n for (k, n) in PROVIDED_BY if k == "credential_types"}
                message = missing_plugin(
                    "credential_types", ctype, f'credential type "{ctype}"'
                ) or (
                    f'unknown credential type "{ctype}" (installed: {", ".join(sorted(types)) or "none"}){did_you_mean(ctype, known)}'
                )
                self.add(file, key, message, agent=agent.name)
            else:
                message = self.missing_credential(ctype, instance)
                if message:
                    self.add(file, key, message, agent=agent.name)

    def flow_and_budget(self, agent: Agent, file: str) -> None:
        """What the schema cannot check of ``[flow]`` and ``[budget]``: expressions parse,
        controls that exclude each other; and a money budget over a model without a price."""
        reported = {re.split(r"[.\[]", p.key)[0] for p in self.problems if p.agent == agent.name}
        for key, parse in (("flow", lambda: agent.flow), ("budget", lambda: agent.budgets)):
            if key in agent.config and key not in reported:
                try:
                    parse()
                except ConfigError as exc:
                    self.add(file, exc.key, exc.message, agent=agent.name)
        if "budget" in reported or "budget" in {p.key for p in self.problems if p.agent is None}:
            return
        try:
            budgets = agent.budgets
        except ConfigError:
            return
        money = [limit for _, _, limit in budgets.scoped()] + [budgets.per_run]
        if any(limit is not None and limit.usd is not None for limit in money):
            self.unpriced_models(agent, file)

    def unpriced_models(self, agent: Agent, file: str) -> None:
        """A warning per model of ``agent`` whose calls have no known price."""
        from llamaherd.models import model_config
        from llamaherd.pricing import price_for

        tables = dict(_tables(self.project.config.get("models")))
        for name in agent.models:
            table = tables.get(name)
            provider = self.registry.providers.get((table or {}).get("provider"))
            if table is None or provider is None:
                continue
            try:
                config = model_config("config.toml", name, table)
            except ConfigError:
                continue
            prices = getattr(provider, "prices", None) or {}
            if config.pricing is None and price_for(prices, config.model) is None:
                self.add(
                    file,
                    "budget",
                    f"model {name} ({config.model}) has no known price: money budgets count "
                    "its calls as of unknown cost (token budgets still hold); give "
                    f"[models.{name}] a `pricing` table",
                    agent=agent.name,
                    warning=True,
                )

    def agent_webhooks(self, agent: Agent, file: str) -> None:
        hooks = agent.config.get("webhooks")
        if "webhooks" not in self.schemas.agent_keys or not isinstance(hooks, list):
            return
        defined = [name for name, _ in _tables(self.project.config.get("webhooks"))]
        for i, entry in enumerate(hooks):
            source = entry.get("source") if isinstance(entry, dict) else None
            if isinstance(source, str) and source not in defined:
                self.add(
                    file,
                    f"webhooks[{i}].source",
                    f"no [webhooks.{source}] in config.toml (defined: {', '.join(defined) or 'none'}){did_you_mean(source, defined)}",
                    agent=agent.name,
                )

    def frontmatter(self, agent: Agent) -> None:
        """``name`` and ``description`` are optional (the directory names the agent); when
        given they are text, and a ``name`` that differs from the directory is pointed out."""
        file = self.project.relative(agent.skill_file)
        for key in ("name", "description"):
            value = agent.meta.get(key)
            if key in agent.meta and (not isinstance(value, str) or not value.strip()):
                self.add(file, key, "expected a non-empty string", agent=agent.name, warning=True)
        name = agent.meta.get("name")
        if isinstance(name, str) and name.strip() and name != agent.name:
            self.add(
                file,
                "name",
                f'"{name}" differs from the directory name "{agent.name}"',
                agent=agent.name,
                warning=True,
            )


def _touches(key: str, reported: Collection[str]) -> bool:
    """Whether ``key`` is one of ``reported``, inside one (``webhooks[1].x`` inside
    ``webhooks[1]``) or holds one."""
    return any(
        key == other
        or key.startswith((other + ".", other + "["))
        or other.startswith((key + ".", key + "["))
        for other in reported
    )


def _tables(value: Any) -> list[tuple[str, Any]]:
    return list(value.items()) if isinstance(value, dict) else []


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def validate_project(
    project: Project,
    registry: Any,
    agents: Iterable[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Problem]:
    """Every problem of ``project`` (or only of the named ``agents``), errors and warnings;
    ``progress(done, total)`` after each agent checked.

    Parse errors the loader collected (``project.errors``) come first, relative to the root.
    """
    checker = _Checker(project, registry)
    wanted = None if agents is None else set(agents)
    found = project.agents
    for error in project.errors:
        file = project.relative(Path(error.file))
        owner = Path(file).parts[1] if file.startswith("agents/") else None
        if wanted is None or owner in wanted:
            checker.add(file, error.key, error.message, agent=owner)
    checker.check_project()
    checked = [agent for name, agent in found.items() if wanted is None or name in wanted]
    if progress is not None:
        progress(0, len(checked))
    for done, agent in enumerate(checked, 1):
        checker.check_agent(agent)
        if progress is not None:
            progress(done, len(checked))
    return list(dict.fromkeys(checker.problems))

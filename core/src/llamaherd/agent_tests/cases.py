"""Test cases: ``agents/<name>/tests/*.toml``, each one run of the agent and what it must do.

```toml
description = "labels a new pull request"

[trigger]                      # what starts the run (required)
kind = "webhook"               # manual, scheduled, webhook, agent, or a plugin's trigger kind
source = "github"              # webhook: the [webhooks.<name>] source
event = "pull_request"         # webhook: the event (its header), when the body does not say
payload = "pr-opened.json"     # a file beside the case, or a table: the body (or a recorded
                               # delivery {"headers": ..., "body": ...})

[model]                        # the model's side (default: the cassette <case>.cassette.json)
cassette = "pr-opened.cassette.json"
# live = true                  # ask the agent's configured model instead
match = "request"              # or "prompt": only the prompts and tools must match
ignore = ['\\d{4}-\\d\\d-\\d\\dT[\\d:]+Z']   # masked in requests before they are compared

[credentials]                  # test values staged instead of the real ones
github_token = { token = "ghp_test" }

[params]                       # merged over the agent's [params]
repo = "acme/sandbox"

[[calls]]                      # calls to other agents, answered here
agent = "labeler"
return = { label = "bug" }

[expect]
state = "done"
return = { label = "bug" }
max_turns = 6

[[expect.commands]]
command = { glob = "gh pr edit 7 *" }
```

The keys of ``[expect]`` are the registered expectations (``register_expectations``); the
schema of a case is core's keys plus theirs, checked like a config file (unknown keys get a
did-you-mean). ``al test`` collects every ``*.toml`` under each agent's ``tests/`` folder.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from llamaherd.agent_tests.cassette import MATCHES
from llamaherd.agent_tests.fence import CallAnswer
from llamaherd.errors import ConfigError
from llamaherd.project import Project, read_project_text, read_toml

TESTS_FOLDER = "tests"
CASSETTE_SUFFIX = ".cassette.json"
MAX_PAYLOAD = 16 * 1024 * 1024  # bytes of one payload file a case names

_PAYLOAD = {
    "anyOf": [{"type": "string"}, {"type": "object"}],
    "description": "A JSON file beside the case, or a table.",
}
TRIGGER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What starts the run: a trigger kind and what that kind of event carries.",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "kind": {
            "type": "string",
            "minLength": 1,
            "description": "manual, scheduled, webhook, agent, ...",
        },
        "source": {
            "type": "string",
            "description": "webhook: the [webhooks.<name>] source; else the event's source",
        },
        "event": {"type": "string", "description": "webhook: the event, as its header names it"},
        "delivery": {"type": "string", "description": "webhook: the delivery id (default: test)"},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "payload": _PAYLOAD,
        "prompt": {"type": "string", "description": "manual: the task (al run AGENT PROMPT)"},
        "caller": {"type": "string", "description": "agent: the calling agent"},
        "caller_run": {"type": "string", "description": "agent: the calling run's id"},
        "call_id": {"type": "integer", "minimum": 1},
        "context": {"type": "string", "description": "agent: the call's context"},
        "depth": {"type": "integer", "minimum": 1},
        "event_payload": {
            **_PAYLOAD,
            "description": "The event's payload exactly as its trigger type emits it (al record "
            "writes it when the type cannot build the event again from the delivery).",
        },
        "prompt_block": {
            "type": "string",
            "description": "With event_payload: the run's trigger block exactly, when the "
            "trigger gave its own (al chat).",
        },
    },
}
CASE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["trigger"],
    "additionalProperties": False,
    "properties": {
        "description": {"type": "string"},
        "trigger": TRIGGER_SCHEMA,
        "model": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "cassette": {"type": "string", "minLength": 1},
                "live": {"type": "boolean"},
                "match": {"enum": list(MATCHES)},
                "ignore": {"type": "array", "items": {"type": "string"}},
            },
        },
        "credentials": {
            "type": "object",
            "description": '"type" or "type:instance" -> {field = value}: staged test values.',
            "additionalProperties": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "params": {"type": "object"},
        "calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["agent"],
                "additionalProperties": False,
                "properties": {
                    "agent": {"type": "string"},
                    "context": {"description": "answers only calls whose context matches"},
                    "return": {"description": "the callee's return value"},
                    "error": {"type": "string", "description": "the callee fails with this"},
                },
            },
        },
        "events": {"type": "array", "items": TRIGGER_SCHEMA},
        "replies": {"type": "array", "items": {"type": "string"}},
        "expect": {"type": "object"},  # its properties: the registered expectations
    },
}


@dataclass
class Case:
    """One test case, read and checked."""

    path: Path
    agent: str
    trigger: dict[str, Any]
    description: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    live: bool = False
    cassette: Path | None = None
    match: str = "request"
    ignore: list[re.Pattern[str]] = field(default_factory=list)
    credentials: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    calls: list[CallAnswer] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    expect: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def id(self) -> str:
        return f"{self.agent}/{self.name}"

    def files(self) -> list[str]:
        """The sandbox paths ``[[expect.files]]`` asks about."""
        return [str(entry["path"]) for entry in self.expect.get("files") or []]


def case_schema(registry: Any) -> dict[str, Any]:
    """The case document: core's keys, ``[expect]`` holding each registered expectation."""
    schema = json.loads(json.dumps(CASE_SCHEMA))
    schema["properties"]["expect"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            name: {**expectation.schema, "description": expectation.description}
            for name, expectation in sorted(registry.expectations.items())
        },
    }
    return schema


def load_case(
    path: Path, agent: str, registry: Any, validator: Draft202012Validator | None = None
) -> Case:
    """The case in file ``path`` for ``agent``; a ConfigError naming the file and key of the
    first problem."""
    from llamaherd.schema import dotted, errors_of

    data = read_toml(path)
    validator = validator or Draft202012Validator(case_schema(registry))
    for key, message in errors_of(validator, data):
        raise ConfigError(str(path), dotted(key), message)
    for key in _not_finite(data, []):
        raise ConfigError(str(path), dotted(key), "expected a finite number, got nan or inf")
    model = data.get("model") or {}
    live = bool(model.get("live", False))
    cassette = None if live else path.parent / model.get("cassette", path.stem + CASSETTE_SUFFIX)
    return Case(
        path=path,
        agent=agent,
        trigger=_trigger(path, data["trigger"], "trigger"),
        description=str(data.get("description", "")),
        events=[_trigger(path, e, f"events[{i}]") for i, e in enumerate(data.get("events") or [])],
        live=live,
        cassette=cassette,
        match=str(model.get("match", "request")),
        ignore=[
            _pattern(path, f"model.ignore[{i}]", p) for i, p in enumerate(model.get("ignore") or [])
        ],
        credentials={
            _credential_key(path, ref): values
            for ref, values in (data.get("credentials") or {}).items()
        },
        params=dict(data.get("params") or {}),
        calls=[
            CallAnswer(c["agent"], c.get("return"), c.get("error"), c.get("context"))
            for c in data.get("calls") or []
        ],
        replies=list(data.get("replies") or []),
        expect=dict(data.get("expect") or {}),
    )


def _not_finite(value: Any, path: list[Any]) -> list[list[Any]]:
    """Where TOML's ``nan`` and ``inf`` are (no expectation means anything by them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _not_finite(v, [*path, k])]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _not_finite(v, [*path, i])]
    return []


def _trigger(path: Path, table: dict[str, Any], key: str) -> dict[str, Any]:
    """A ``[trigger]`` (or ``[[events]]``) table with its payload files read."""
    spec = dict(table)
    for name in ("payload", "event_payload"):
        if isinstance(spec.get(name), str):
            spec[name] = read_payload(path.parent / spec[name], path, f"{key}.{name}")
    return spec


def read_payload(file: Path, case: Path, key: str) -> Any:
    """A payload file a case names (JSON); a ConfigError naming the case and key."""
    if not file.is_file():
        raise ConfigError(str(case), key, f"no such file {file.name!r} beside the case")
    try:
        return json.loads(read_project_text(file, MAX_PAYLOAD))
    except ConfigError as exc:
        raise ConfigError(str(case), key, f"{file.name}: {exc.message}") from None
    except ValueError as exc:
        raise ConfigError(str(case), key, f"{file.name} is not JSON ({exc})") from None


def _pattern(path: Path, key: str, text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(str(path), key, f"not a regular expression ({exc})") from None


def _credential_key(path: Path, ref: str) -> tuple[str, str]:
    from llamaherd.credentials import CredentialError, parse_ref

    try:
        return parse_ref(ref)
    except CredentialError as exc:
        raise ConfigError(str(path), f"credentials.{ref}", str(exc)) from None


# ------------------------------------------------------------------------------ collecting


@dataclass
class Collected:
    """The cases ``al test`` runs, and the files it could not read (collection errors)."""

    cases: list[Case] = field(default_factory=list)
    errors: list[ConfigError] = field(default_factory=list)


def case_files(project: Project, agent: str) -> list[Path]:
    folder = project.root / "agents" / agent / TESTS_FOLDER
    return sorted(folder.glob("*.toml")) if folder.is_dir() else []


def selected(case_id: str, pattern: str | None) -> bool:
    """``-k PATTERN``: a case id (``agent/case``) containing it, or matching it as a glob;
    case-insensitive."""
    if not pattern:
        return True
    wanted, name = pattern.lower(), case_id.lower()
    return wanted in name or fnmatch.fnmatchcase(name, wanted)


def collect(project: Project, registry: Any, agents: list[str], pattern: str | None) -> Collected:
    """The cases of ``agents`` (every agent when empty) whose id ``pattern`` selects."""
    found = Collected()
    for name in agents:
        project.agent(name)  # an unknown agent: a ConfigError naming the known ones
    validator = Draft202012Validator(case_schema(registry))
    for name in agents or sorted(project.agents):
        for path in case_files(project, name):
            if not selected(f"{name}/{path.stem}", pattern):
                continue
            try:
                found.cases.append(load_case(path, name, registry, validator))
            except ConfigError as exc:
                found.errors.append(exc)
    return found

"""Action Llama compatibility: the keys an Action Llama 0.29.1 project may hold beyond ours, how
llamaherd reads them, and the one-line warnings for those it does not act on.

The list is the peer's own (``dist/shared/config/types.d.ts`` and ``dist/shared/validation.js``
of ``@action-llama/action-llama@0.29.1``). Each key here is either read with the peer's meaning
(``defaultAgentScale``, ``projectName``, ``[gateway] url``, the deprecated aliases) or accepted
with a warning saying llamaherd does not act on it; none is ever an error, and none loosens the
check of llamaherd's own keys (``llamaherd.schema`` still refuses an unknown key with a
did-you-mean).

SKILL.md: the peer reads ``description``, ``license`` and ``compatibility`` from the
frontmatter and the runtime config from ``config.toml``; its earlier releases read the runtime
keys from the frontmatter's ``metadata`` table (and the first ones from the frontmatter itself).
``merge_frontmatter`` puts such keys *under* ``config.toml``: a key ``config.toml`` sets wins
whole, a key only the frontmatter sets is used. Every other frontmatter key is kept as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

# A note for ``al validate``: (dotted key, message), reported as a warning.
Note = tuple[str, str]

# Deprecated project keys the peer still reads: old key -> the key it stands for.
DEPRECATED_KEYS: dict[str, str] = {
    "maxTriggerDepth": "maxCallDepth",
    "webhookQueueSize": "workQueueSize",
}

AUTH_TYPES = ("api_key", "oauth_token", "pi_auth")
HARNESS_TYPES = ("pi", "claude")

_HARNESS: dict[str, Any] = {
    "type": "object",
    "description": "Action Llama's harness (`pi`, the default, or `claude`). llamaherd drives "
    "every model itself with the agent's whole `models` list, as `pi` does; `claude` is "
    "accepted with a warning.",
    "properties": {"type": {"enum": list(HARNESS_TYPES), "default": "pi"}},
    "additionalProperties": False,
}

# Top-level project keys of the peer that llamaherd's own schema does not have.
PROJECT_KEYS: dict[str, Any] = {
    "projectName": {
        "type": "string",
        "minLength": 1,
        "description": "Display name of the project: prefixes the scheduler's log lines "
        "(default: the project directory's name).",
    },
    "defaultAgentScale": {
        "type": "integer",
        "minimum": 0,
        "default": 1,
        "description": "`scale` of every agent whose config.toml sets none.",
    },
    "harness": _HARNESS,
    "telemetry": {
        "type": "object",
        "description": "Action Llama's OpenTelemetry settings; accepted, with a warning when "
        "`enabled` (llamaherd exports no telemetry: see `al stats` and the dashboard).",
        "properties": {
            "enabled": {"type": "boolean", "default": False},
            "provider": {"enum": ["otel", "none"], "default": "none"},
            "endpoint": {"type": "string", "pattern": "^https?://"},
            "serviceName": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "samplingRate": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "additionalProperties": False,
    },
    "cloud": {
        "type": "object",
        "description": "Action Llama's cloud runtime (`provider` = vps, cloud-run, ...); "
        "accepted with a warning: llamaherd runs agents on this machine.",
        "properties": {"provider": {"type": "string"}},
    },
    "maxTriggerDepth": {
        "type": "integer",
        "minimum": 0,
        "deprecated": True,
        "description": "Deprecated spelling of `maxCallDepth` (read as it, with a warning).",
    },
    "webhookQueueSize": {
        "type": "integer",
        "minimum": 1,
        "deprecated": True,
        "description": "Deprecated spelling of `workQueueSize` (read as it, with a warning).",
    },
}

LOCAL_KEYS: dict[str, Any] = {
    "enabled": {
        "type": "boolean",
        "default": True,
        "description": "Action Llama's Docker switch, which it forces on; `false` is accepted "
        "with a warning (choose the runtime per agent with `[runtime] type`).",
    },
}

AGENT_KEYS: dict[str, Any] = {"harness": _HARNESS}

# Runtimes of the peer that no first-party plugin provides: ``[runtime]`` keys, checked so that
# a typo is still reported while the runtime itself is missing.
FOREIGN_RUNTIMES: dict[str, dict[str, Any]] = {
    "ssh": {
        "type": {"const": "ssh"},
        "host": {"type": "string", "minLength": 1},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
        "user": {"type": "string"},
        "key_path": {"type": "string"},
        "cwd": {"type": "string"},
        "ssh_options": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def foreign_runtime_message(name: str) -> str:
    from llamaherd.plugins import PROVIDED_BY

    dist = PROVIDED_BY.get(("runtimes", name))
    what = dist or f'a runtime plugin that registers "{name}"'
    return (
        f'runtime "{name}" (Action Llama\'s) is not provided by any installed plugin: install '
        f'{what} (`al plugins` lists what is installed), or use type = "container" or '
        '"host-user"'
    )


# --------------------------------------------------------------------------- reading keys


def setting(config: Mapping[str, Any], key: str, default: Any) -> Any:
    """A top-level project setting: ``key``, else its deprecated alias, else ``default``."""
    if key in config:
        return config[key]
    for old, new in DEPRECATED_KEYS.items():
        if new == key and old in config:
            return config[old]
    return default


# --------------------------------------------------------------------------- warnings


def project_notes(config: Mapping[str, Any]) -> list[Note]:
    """Warnings for the peer's project keys: deprecated aliases, keys not acted on."""
    notes: list[Note] = []
    for old, new in DEPRECATED_KEYS.items():
        if old in config:
            why = f"ignored: {new} is set" if new in config else f"read as {new}"
            notes.append((old, f"deprecated, use {new} ({why})"))
    notes += _harness_notes("harness", config.get("harness"))
    telemetry = _table(config.get("telemetry"))
    if telemetry.get("enabled") is True:
        notes.append(
            (
                "telemetry",
                "not acted on: llamaherd exports no OpenTelemetry data (runs are in "
                "`al stats` and the dashboard)",
            )
        )
    if "cloud" in config:
        notes.append(
            (
                "cloud",
                "not acted on: llamaherd runs agents on this machine ([runtime] type "
                '"container" or "host-user")',
            )
        )
    if _table(config.get("local")).get("enabled") is False:
        notes.append(
            (
                "local.enabled",
                "not acted on (Action Llama forces it on too): agents run in their "
                '[runtime]; set type = "host-user" in an agent to run it without Docker',
            )
        )
    url = _table(config.get("gateway")).get("url")
    if isinstance(url, str) and "0.0.0.0" in url:
        notes.append(("gateway.url", "names 0.0.0.0: give the address senders reach you at"))
    for name, model in _table(config.get("models")).items():
        if isinstance(model, dict) and model.get("authType") == "pi_auth":
            notes.append(
                (
                    f"models.{name}.authType",
                    '"pi_auth" (the pi harness\'s login file) is not read: the model uses its '
                    'stored key, as with "api_key"',
                )
            )
    return notes


def agent_notes(config: Mapping[str, Any]) -> list[Note]:
    """Warnings for the peer's agent keys that llamaherd does not act on."""
    return _harness_notes("harness", config.get("harness"))


def _harness_notes(key: str, harness: Any) -> list[Note]:
    if _table(harness).get("type") != "claude":
        return []
    return [
        (
            f"{key}.type",
            '"claude" is not acted on: llamaherd drives the model itself, with the whole '
            "models list (as the pi harness does)",
        )
    ]


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# --------------------------------------------------------------------------- SKILL.md


# Runtime keys older Action Llama skills carry in their frontmatter (its AgentRuntimeConfig,
# plus the per-agent keys its SKILL.md-era releases read there).
FRONTMATTER_RUNTIME_KEYS = (
    "credentials",
    "models",
    "schedule",
    "webhooks",
    "hooks",
    "params",
    "scale",
    "timeout",
    "maxWorkQueueSize",
    "waitTimeout",
    "runtime",
    "harness",
)


def frontmatter_runtime(meta: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """``(config key, where in the frontmatter, value)`` of the runtime keys a SKILL.md carries:
    under ``metadata`` (Action Llama's later SKILL.md layout) before the top level."""
    metadata = _table(meta.get("metadata"))
    for key in FRONTMATTER_RUNTIME_KEYS:
        if key in metadata:
            yield key, f"metadata.{key}", metadata[key]
        elif key in meta:
            yield key, key, meta[key]


def merge_frontmatter(
    meta: Mapping[str, Any], config: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The agent config: the frontmatter's runtime keys under ``config`` (config.toml).

    Returns the merged config; for each key taken from the frontmatter, where it was (so
    problems with it name SKILL.md); and where the frontmatter holds a value config.toml
    replaces with a different one. A key config.toml sets replaces the frontmatter's whole.
    """
    merged = dict(config)
    origins: dict[str, str] = {}
    shadowed: list[str] = []
    for key, where, value in frontmatter_runtime(meta):
        if key not in config:
            merged[key] = value
            origins[key] = where
        elif config[key] != value:
            shadowed.append(where)
    return merged, origins, shadowed


def frontmatter_notes(origins: Mapping[str, str], shadowed: list[str]) -> list[Note]:
    """One warning naming the runtime keys taken from the frontmatter, one naming those
    config.toml overrides (Action Llama 0.29 reads neither from SKILL.md)."""
    notes: list[Note] = []
    if origins:
        where = ", ".join(origins.values())
        them = "it" if len(origins) == 1 else "them"
        notes.append(
            (
                "metadata" if all(v.startswith("metadata.") for v in origins.values()) else "",
                f"{where}: used as agent config (config.toml does not set {them}); "
                f"Action Llama 0.29 reads agent config from config.toml only: move {them} there",
            )
        )
    if shadowed:
        notes.append(
            (
                "",
                f"{', '.join(shadowed)}: ignored, config.toml sets "
                f"{'it' if len(shadowed) == 1 else 'them'}",
            )
        )
    return notes

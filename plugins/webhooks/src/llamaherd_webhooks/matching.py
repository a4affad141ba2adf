"""Which agents (``[[webhooks]]`` entries) and waits (``wait_for_trigger`` filters) an event matches.

An event's fields are the normalised dict a source's ``parse`` returns: ``event``, ``action``,
``repo``, ``org``, ``branch``, ``labels``, ``assignees``, ``author``, ``conclusion`` and the
full ``payload``. Every filter key present must match; list values mean "any of".
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from llamaherd.api import MISSING, lookup

# filter key -> (field of the event, compare with glob patterns, case-insensitive)
FILTERS: dict[str, tuple[str, bool, bool]] = {
    "actions": ("action", False, False),
    "repos": ("repo", True, True),
    "orgs": ("org", False, True),
    "branches": ("branch", True, False),
    "labels": ("labels", False, False),
    "assignee": ("assignees", False, True),
    "author": ("author", False, True),
    "conclusions": ("conclusion", False, False),
}
# Singular spellings accepted in wait filters (``{"event": "push", "repo": "o/r"}``).
ALIASES = {
    "event": "events",
    "action": "actions",
    "repo": "repos",
    "org": "orgs",
    "branch": "branches",
    "label": "labels",
    "conclusion": "conclusions",
}
# Every key a [[webhooks]] entry may hold.
ENTRY_KEYS = frozenset({"source", "events", "match", *FILTERS})


def as_list(value: Any) -> list[Any]:
    """A filter value as a list: scalars become one-item lists."""
    return list(value) if isinstance(value, list | tuple) else [value]


def _one_matches(pattern: Any, value: Any, glob: bool, fold: bool) -> bool:
    if not isinstance(pattern, str) or not isinstance(value, str):
        return pattern == value
    if fold:
        pattern, value = pattern.lower(), value.lower()
    return fnmatchcase(value, pattern) if glob else pattern == value


def _any_matches(patterns: Any, value: Any, glob: bool = False, fold: bool = False) -> bool:
    """True when some pattern equals the value (or any of the values, for list fields)."""
    if value is None or value is MISSING:
        return False
    values = value if isinstance(value, list) else [value]
    return any(_one_matches(p, v, glob, fold) for p in as_list(patterns) for v in values)


def _events_match(patterns: Any, fields: dict[str, Any]) -> bool:
    # "pull_request" matches any action; "pull_request.opened" only that action.
    event, action = fields.get("event"), fields.get("action")
    names = {event, f"{event}.{action}"} if action else {event}
    return any(p in names for p in as_list(patterns))


def payload_matches(predicates: dict[str, Any], payload: Any) -> bool:
    """Every dotted path holds the expected value (or one of a list of them)."""
    return all(
        _any_matches(expected, lookup(payload, path)) for path, expected in predicates.items()
    )


def event_field(fields: dict[str, Any], path: str) -> Any:
    """A wait filter's dotted key: a normalised field (``number``, ``sender``), else a path into
    the raw payload, with or without its ``payload.`` prefix (``pull_request.base.ref``)."""
    value = lookup(fields, path)
    if value is MISSING:
        value = lookup(fields.get("payload"), path)
    return value


def fields_match(predicates: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Every dotted key of a wait filter (see ``event_field``) holds the expected value."""
    return all(
        _any_matches(expected, event_field(fields, path)) for path, expected in predicates.items()
    )


def normalise_filter(raw: dict[str, Any]) -> dict[str, Any]:
    """Accept singular spellings (``event``, ``repo``, ...) as their plural filter keys."""
    return {ALIASES.get(key, key): value for key, value in raw.items()}


def entry_matches(entry: dict[str, Any], source: str | None, fields: dict[str, Any]) -> bool:
    """Does an event from webhook source ``source`` with these fields pass every filter?"""
    entry = normalise_filter(entry)
    if entry.get("source") not in (None, source):
        return False
    if "events" in entry and not _events_match(entry["events"], fields):
        return False
    for key, (field, glob, fold) in FILTERS.items():
        if key in entry and not _any_matches(entry[key], fields.get(field), glob, fold):
            return False
    return payload_matches(entry.get("match") or {}, fields.get("payload", {}))


def matching_agents(agents: dict[str, Any], source: str, fields: dict[str, Any]) -> list[str]:
    """Names of the agents with a ``[[webhooks]]`` entry matching the event, in name order."""
    return [
        name
        for name, agent in sorted(agents.items())
        if any(entry_matches(entry, source, fields) for entry in agent.config.get("webhooks") or [])
    ]

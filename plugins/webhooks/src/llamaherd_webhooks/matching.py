"""Which agents (``[[webhooks]]`` entries) and waits (``wait_for_trigger`` filters) an event matches.

An event's fields are the normalised dict a source's ``parse`` returns (``event``, ``action``,
the full ``payload``, and whatever its filters compare with). The keys an entry may hold are
the common ones (``COMMON_KEYS``) and the filter keys its source type declares
(``WebhookSource.filters``: key -> ``WebhookFilter``). Every key present must match; list values
mean "any of", and so do keys of one entry filtering the same field (GitHub's ``org`` and
``orgs``, as Action Llama merges them).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

from llamaherd.api import MISSING, WebhookFilter, WebhookSource, lookup

# Keys of every [[webhooks]] entry, whatever its source's type: a source's filters cannot
# redefine them.
COMMON_KEYS = frozenset({"source", "events", "match"})


def filters_of(source: WebhookSource | None) -> dict[str, WebhookFilter]:
    """The filter keys a source type declares (none for a missing source)."""
    declared = getattr(source, "filters", None) or {}
    return {key: spec for key, spec in declared.items() if key not in COMMON_KEYS}


def as_list(value: Any) -> list[Any]:
    """A filter value as a list: scalars become one-item lists."""
    return list(value) if isinstance(value, list | tuple) else [value]


def _one_matches(pattern: Any, value: Any, glob: bool, fold: bool) -> bool:
    if not isinstance(pattern, str) or not isinstance(value, str):
        return pattern == value
    if fold:
        pattern, value = pattern.lower(), value.lower()
    return fnmatchcase(value, pattern) if glob else pattern == value


def _absent(value: Any) -> bool:
    return value is None or value is MISSING or value == []


def _any_matches(patterns: Any, value: Any, glob: bool = False, fold: bool = False) -> bool:
    """True when some pattern equals the value (or any of the values, for list fields)."""
    if _absent(value):
        return False
    values = value if isinstance(value, list) else [value]
    return any(_one_matches(p, v, glob, fold) for p in as_list(patterns) for v in values)


def _filter_matches(spec: WebhookFilter, patterns: Any, fields: dict[str, Any]) -> bool:
    value = fields.get(spec.field)
    if _absent(value):
        return spec.skip_when_absent
    return _any_matches(patterns, value, spec.glob, spec.fold)


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


def normalise_filter(raw: dict[str, Any], filters: dict[str, WebhookFilter]) -> dict[str, Any]:
    """Accept singular spellings (``event``, ``repo``, ``channel``, ``branch``...) for the
    plural keys the source has."""
    known = COMMON_KEYS | set(filters)

    def plural(key: str) -> str:
        if key in known:
            return key
        return next((p for p in (key + "s", key + "es") if p in known), key)

    return {plural(key): value for key, value in raw.items()}


def entry_matches(
    entry: dict[str, Any],
    source: str | None,
    fields: dict[str, Any],
    filters: dict[str, WebhookFilter],
) -> bool:
    """Does an event from webhook source ``source`` (whose type declares ``filters``) with
    these fields pass every key of ``entry``? A key the type does not declare never matches."""
    if entry.get("source") not in (None, source):
        return False
    if "events" in entry and not _events_match(entry["events"], fields):
        return False
    by_field: dict[str, tuple[WebhookFilter, list[Any]]] = {}
    for key, patterns in entry.items():
        if key in COMMON_KEYS:
            continue
        spec = filters.get(key)
        if spec is None:
            return False
        _, merged = by_field.setdefault(spec.field, (spec, []))
        merged.extend(as_list(patterns))
    if not all(_filter_matches(spec, patterns, fields) for spec, patterns in by_field.values()):
        return False
    return payload_matches(entry.get("match") or {}, fields.get("payload", {}))


def matching_agents(
    agents: dict[str, Any], source: str, fields: dict[str, Any], filters: dict[str, WebhookFilter]
) -> list[str]:
    """Names of the agents with a ``[[webhooks]]`` entry matching the event, in name order."""
    return [
        name
        for name, agent in sorted(agents.items())
        if any(
            entry_matches(entry, source, fields, filters)
            for entry in agent.config.get("webhooks") or []
        )
    ]

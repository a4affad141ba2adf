"""Matching trigger events to runs parked in ``wait_for_trigger``.

A wait filter is ``{"type": <trigger type>, <field>: <value>, ...}``. When the trigger type
registers ``matches(filter, event)`` it decides; otherwise every other key of the filter must
equal the event's field of that name (``kind``, ``source``, then the payload, dotted paths
allowed; a list means any of).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamaherd.types import TriggerEvent

log = logging.getLogger("llamaherd.waits")
MISSING = object()  # what lookup returns for a path that is not there
# Filter "type" values that name an event kind rather than a trigger type.
KIND_ALIASES = {
    "webhook": "webhook",
    "webhooks": "webhook",
    "agent": "agent",
    "manual": "manual",
    "schedule": "scheduled",
    "scheduled": "scheduled",
    "cron": "scheduled",
}


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted path (``pull_request.base.ref``, ``labels.0.name``), or MISSING."""
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return MISSING
    return data


def field_value(event: TriggerEvent, path: str) -> Any:
    """An event field: ``kind``/``source``/``agent`` or a dotted path into the payload."""
    if path in ("kind", "source", "agent"):
        return getattr(event, path)
    return lookup(event.payload, path)


def generic_matches(wait_filter: dict[str, Any], event: TriggerEvent) -> bool:
    """Field equality: every filter key but ``type`` equals the event's (lists: any of)."""
    for key, expected in wait_filter.items():
        if key == "type":
            continue
        value = field_value(event, key)
        if value is MISSING:
            return False
        options = expected if isinstance(expected, list) else [expected]
        if value not in options:
            return False
    return True


def trigger_type_for(registry: Any, type_name: str) -> Any:
    """The trigger type a filter names: by name, else the one producing that event kind
    (``{"type": "webhook"}`` finds the ``webhooks`` type)."""
    found = registry.trigger_types.get(type_name)
    if found is None:
        kind = KIND_ALIASES.get(type_name, type_name)
        found = next(
            (
                t
                for t in registry.trigger_types.values()
                if KIND_ALIASES.get(t.name, t.name) == kind
            ),
            None,
        )
    return found


def filter_matches(registry: Any, wait_filter: dict[str, Any], event: TriggerEvent) -> bool:
    """Does ``event`` satisfy ``wait_filter``? The trigger type's own ``matches`` wins."""
    type_name = str(wait_filter.get("type"))
    trigger_type = trigger_type_for(registry, type_name)
    kinds = {KIND_ALIASES.get(type_name, type_name)}
    if trigger_type is not None:
        kinds.add(KIND_ALIASES.get(trigger_type.name, trigger_type.name))
    if event.kind not in kinds:
        return False
    matcher = getattr(trigger_type, "matches", None)
    try:
        return bool(matcher(wait_filter, event)) if matcher else generic_matches(wait_filter, event)
    except Exception as exc:  # a plugin's matcher bug must not break emit for everyone
        log.warning("wait matcher of %r failed: %s: %s", type_name, type(exc).__name__, exc)
        return False


def resume_payload(event: TriggerEvent) -> dict[str, Any]:
    """What the waiting run's ``wait_for_trigger`` call returns."""
    return {
        "result": {
            "kind": event.kind,
            "agent": event.agent,
            "source": event.source,
            "payload": event.payload,
        },
        "is_error": False,
    }


@dataclass
class ScriptWait:
    """An ``al-wait`` command blocked in a running run's sandbox (a gateway request)."""

    run_id: str
    agent: str
    wait_filter: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    ended: str | None = None  # why it ended without a trigger (its run ended)


class ScriptWaits:
    """The ``al-wait`` requests in flight. In memory: they live only as long as the request."""

    def __init__(self) -> None:
        self._waits: list[ScriptWait] = []
        self._lock = threading.Lock()

    def add(self, run_id: str, agent: str, wait_filter: dict[str, Any]) -> ScriptWait:
        wait = ScriptWait(run_id, agent, wait_filter)
        with self._lock:
            self._waits.append(wait)
        return wait

    def remove(self, wait: ScriptWait) -> None:
        with self._lock:
            if wait in self._waits:
                self._waits.remove(wait)

    def end_run(self, run_id: str, why: str) -> None:
        """The run ended: its blocked ``al-wait`` commands end too, answered ``why``."""
        with self._lock:
            ended = [wait for wait in self._waits if wait.run_id == run_id]
            self._waits = [wait for wait in self._waits if wait.run_id != run_id]
        for wait in ended:
            wait.ended = why
            wait.done.set()

    def offer(self, registry: Any, event: TriggerEvent, alive: Callable[[str], bool]) -> list[str]:
        """Hand ``event`` to every matching blocked ``al-wait`` of a run that is still
        ``alive``; return their run ids (only those really took it)."""
        with self._lock:
            waits = list(self._waits)
        taken = []
        for wait in waits:
            if event.agent and wait.agent != event.agent:
                continue
            if not alive(wait.run_id):  # its run ended: nobody would read the event
                self.end_run(wait.run_id, "the run ended")
                continue
            if filter_matches(registry, wait.wait_filter, event):
                with self._lock:
                    if wait not in self._waits:  # it ended (or another event took it) meanwhile
                        continue
                    self._waits.remove(wait)
                    wait.result = resume_payload(event)["result"]
                wait.done.set()
                taken.append(wait.run_id)
        return taken


SCRIPT_WAITS = ScriptWaits()


def match_waiting(
    engine: Any, event: TriggerEvent, waiting: list[tuple[str, str, Any]] | None = None
) -> list[str]:
    """Resume every waiting run whose filter ``event`` matches; return their ids.

    Only runs of the event's agent are offered it (an event with no agent goes to any
    waiting run). Each run is resumed at most once (``store.resume_waiting``). Blocked
    ``al-wait`` commands of running runs get it too. ``waiting``: the waiting runs'
    filters (``store.wait_filters()``) as read once for several events of one occurrence,
    in the same write transaction (``Engine.emit_all``); the runs this event resumes leave it.
    """
    resumed = SCRIPT_WAITS.offer(engine.registry, event, engine.runner.is_active)
    if waiting is None:
        waiting = engine.store.wait_filters()
    for entry in list(waiting):
        run_id, agent, wait_filter = entry
        if event.agent and agent != event.agent:
            continue
        if (
            wait_filter
            and filter_matches(engine.registry, wait_filter, event)
            and engine.store.resume_waiting(run_id, resume_payload(event))
        ):
            resumed.append(run_id)
            waiting.remove(entry)
    return resumed

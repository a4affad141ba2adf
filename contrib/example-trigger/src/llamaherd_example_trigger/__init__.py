"""llamaherd-example-trigger: a ``file_watch`` trigger type, as a third party would write it.

The whole plugin is this module: one hook that registers one object. The object's ``schema`` is
a JSON Schema fragment whose properties become keys of an agent's ``config.toml``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Emit, TriggerContext, TriggerEvent, TriggerInfo

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "watch": {
            "type": "object",
            "description": "Run the agent when one of these files changes (file_watch trigger).",
            "properties": {
                "paths": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "Files to watch; a change of size or modification time fires.",
                },
                "interval": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "default": 5,
                    "description": "Seconds between checks.",
                },
            },
            "required": ["paths"],
            "additionalProperties": False,
        }
    },
}


def _stamp(path: str) -> tuple[float, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime, info.st_size


class FileWatchTrigger:
    """Polls the watched files of each configured agent and emits one event per change."""

    name = "file_watch"
    description = "Runs an agent when a watched file changes."
    schema = SCHEMA

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, ctx: TriggerContext) -> None:
        # A live reload that changed the agents using `watch` calls stop(), then start() again
        # (this type has no `reconfigure`): start afresh.
        self._stop.clear()
        # ctx.agents: the agents whose config sets `watch` (this type's schema key).
        for agent in ctx.agents:
            thread = threading.Thread(
                target=self._poll, args=(agent.name, agent.config["watch"], ctx.emit), daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _poll(self, agent: str, watch: dict[str, Any], emit: Emit) -> None:
        paths = list(watch["paths"])
        seen = {path: _stamp(path) for path in paths}
        while not self._stop.wait(float(watch.get("interval", 5))):
            for path in paths:
                stamp = _stamp(path)
                if stamp != seen[path]:
                    seen[path] = stamp
                    emit(self.event(agent, path))

    def event(self, agent: str, path: str) -> TriggerEvent:
        return TriggerEvent(
            agent=agent,
            kind="file_watch",
            payload={"path": path},
            prompt=f"<file-changed>{path}</file-changed>\nThe watched file {path} changed.",
            source=self.name,
        )

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()


@hookimpl
def register_trigger_types(register):
    register(FileWatchTrigger())


@hookimpl
def describe_triggers(agent, now):
    """What the dashboard's agent page shows: the files this agent watches."""
    watch = agent.config.get("watch")
    if not watch:
        return []
    details = {"interval": f"{watch.get('interval', 5)}s"}
    return [TriggerInfo("file_watch", ", ".join(watch["paths"]), details)]

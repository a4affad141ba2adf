"""The run page's Replay: ``al replay`` run in the scheduler's process, in the background.

A replay runs a sandbox and may ask a model, so few run at once (``RUNNING``), each on its own
thread; the newest ``KEPT`` results stay in memory for their page (they are not stored: a
replay is fenced like a test and leaves nothing behind)."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

RUNNING = 2  # replays going on at once
KEPT = 20  # finished replays whose page can still be shown


@dataclass
class Replay:
    run_id: str
    options: dict[str, Any]
    state: str = "running"  # then "done" or "failed"
    result: dict[str, Any] | None = None  # llamaherd.api.replayed_dict
    error: str | None = None
    rows: list[Any] = field(default_factory=list)


class Replays:
    """The replays started from the dashboard, by token."""

    def __init__(self) -> None:
        self._replays: OrderedDict[str, Replay] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str) -> Replay | None:
        with self._lock:
            return self._replays.get(token)

    def start(self, engine: Any, run_id: str, options: dict[str, Any]) -> str:
        """Start replaying ``run_id``; its token. LookupError when ``RUNNING`` replays are
        going on already."""
        with self._lock:
            if sum(1 for r in self._replays.values() if r.state == "running") >= RUNNING:
                raise LookupError(f"{RUNNING} replays are running already: wait for one to end")
            token = secrets.token_hex(8)
            self._replays[token] = replay = Replay(run_id, options)
            while len(self._replays) > KEPT + RUNNING:
                oldest = next(t for t, r in self._replays.items() if r.state != "running")
                del self._replays[oldest]
        thread = threading.Thread(
            target=self._run, args=(engine, replay), name=f"replay-{run_id}", daemon=True
        )
        thread.start()
        return token

    @staticmethod
    def _run(engine: Any, replay: Replay) -> None:
        from llamaherd.api import LlamaherdError, replay_run, replayed_dict

        try:
            done = replay_run(
                engine.project, engine.registry, engine.store, replay.run_id, **replay.options
            )
        except LlamaherdError as exc:
            replay.error, replay.state = str(exc), "failed"
            return
        except Exception as exc:  # shown on its page: the scheduler goes on
            replay.error, replay.state = f"{type(exc).__name__}: {exc}", "failed"
            return
        replay.result, replay.rows = replayed_dict(done), done.rows
        replay.state = "done"

"""The Engine: what a scheduler and a foreground ``al run`` share.

It holds the project, the store, the plugin registry, the credential store, the HTTP server
(gateway API, control API and plugin routes) and the runner. Triggers call ``emit``; the
scheduler adds trigger plugins, a dispatcher and crash recovery on top (``llamaherd.scheduler``).

STATUS: interface stub; attributes and methods below are the contract.
"""

from __future__ import annotations

import os
import time
from typing import Any

from llamaherd.types import TriggerEvent


def clock() -> float:
    """Wall time, or the float in the file named by ``AL_FAKE_CLOCK_FILE`` (tests)."""
    fake = os.environ.get("AL_FAKE_CLOCK_FILE")
    if fake:
        try:
            with open(fake) as fh:
                return float(fh.read().strip())
        except (OSError, ValueError):
            pass
    return time.time()


class Engine:
    project: Any  # llamaherd.project.Project
    store: Any  # llamaherd.store.Store
    registry: Any  # llamaherd.plugins.Registry
    credentials: Any  # llamaherd.credentials.CredentialStore
    runner: Any  # llamaherd.runner.Runner
    host: str  # this process's host id: "<hostname>:<pid>"
    gateway_url: str  # http://127.0.0.1:<port> once the server is up
    gateway_socket: str | None  # unix socket path serving the same app (for containers)
    clock = staticmethod(clock)

    def emit(self, event: TriggerEvent, *, coalesce: bool = False) -> dict[str, Any]:
        """Queue ``event`` for its agent (durably, before returning) and offer it to waiting
        runs. Returns {"queued": item_id | None, "resumed": [run ids], "refused": reason | None}.
        Agent-state gating happens here (hibernate refuses webhooks and calls, off refuses all).
        """
        raise NotImplementedError

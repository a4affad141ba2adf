"""Time and identity of this process: the clock every timestamp comes from, and the host id
under which a scheduler heartbeats and owns runs.

Its own module because the store, the prompts, the engine and the plugins all need it, and none
of them should import the others for it.
"""

from __future__ import annotations

import os
import socket
import time

_fake_now: list[float] = []


def clock() -> float:
    """Wall time, or the float in the file named by ``AL_FAKE_CLOCK_FILE`` (tests).

    A fake clock never falls back to wall time: a file caught half-written keeps the last value.
    """
    fake = os.environ.get("AL_FAKE_CLOCK_FILE")
    if not fake:
        return time.time()
    try:
        with open(fake) as fh:
            _fake_now[:] = [float(fh.read().strip())]
    except (OSError, ValueError):
        pass
    return _fake_now[0] if _fake_now else time.time()


def machine_name() -> str:
    """This machine's name in host ids: $AL_HOST_NAME, else the hostname.

    Set AL_HOST_NAME when schedulers that do not share a process table share a hostname
    (containers with the host's UTS namespace): a host on the same machine is judged by its pid."""
    return os.environ.get("AL_HOST_NAME") or socket.gethostname()


def host_id() -> str:
    """``<machine>:<pid>``: this scheduler process among all that share a database."""
    return f"{machine_name()}:{os.getpid()}"

"""Is a process still there (a scheduler recorded in ``scheduler.json``, the owner of a
gateway socket directory)?"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs; an exited one its parent has not reaped yet (a zombie, e.g.
    under a container init that never reaps) counts as gone."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: the signal said it exists

"""The scheduler of this checkout, as the files it writes tell (``.al/scheduler.json``).

Apart from ``llamaherd.scheduler`` so the read commands (``al stat``, ``al runs``, ``al logs``)
find a running scheduler, and ask it, without importing the scheduler, store or web stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def scheduler_info(state_dir: Path) -> dict[str, Any] | None:
    """What a running scheduler wrote about itself in ``.al/scheduler.json``, if it still runs."""
    try:
        info = json.loads((state_dir / "scheduler.json").read_text())
    except (OSError, ValueError):
        return None
    return info if pid_alive(int(info.get("pid", 0))) else None


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

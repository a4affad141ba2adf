"""The scheduler of this checkout, as the files it writes tell (``.al/scheduler.json``).

Apart from ``llamaherd.scheduler`` so the read commands (``al stat``, ``al runs``, ``al logs``)
find a running scheduler, and ask it, without importing the scheduler, store or web stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llamaherd.processes import pid_alive


def scheduler_info(state_dir: Path) -> dict[str, Any] | None:
    """What a running scheduler wrote about itself in ``.al/scheduler.json``, if it still runs."""
    try:
        info = json.loads((state_dir / "scheduler.json").read_text())
    except (OSError, ValueError):
        return None
    return info if pid_alive(int(info.get("pid", 0))) else None

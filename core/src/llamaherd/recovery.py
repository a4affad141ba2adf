"""What a run interrupted by its scheduler's death (or a stop past its grace, or its sandbox's
host lost) is told: when it started, its last recorded progress, since when the system was
down, now and for how long. The new run of a requeued trigger gets it as its
``<recovery-notice>`` (``prompts.recovery_notice``); a run adopted by the next scheduler (its
sandbox still there) gets it as the result of the tool call the crash cut off
(``session.Session``), with the same times."""

from __future__ import annotations

from typing import Any

# The run event recording an adoption; its data is the run's ``recovery_facts``.
ADOPTED = "adopted"


def recovery_facts(
    store: Any,
    run: Any,
    events: list[dict[str, Any]],
    now: float,
    *,
    cause: str | None = None,
    down_until_now: bool = False,
) -> dict[str, Any]:
    """The facts of ``run``'s interruption: its id, start, last progress (its last event,
    ``events``) and since when the system was down. Its scheduler's last heartbeat (one a
    second) dates a crash better than the run's last event (a run may be quiet for long in a
    tool call), unless a ``cause`` says its scheduler lives (a lost host). ``down_until_now``:
    the system is back ``now`` (a crash found at startup); else the downtime is counted up to
    whenever the facts are shown."""
    last_progress = events[-1]["at"] if events else run.started_at
    beats = [] if cause is not None else [
        host["heartbeat_at"] for host in store.hosts() if host["host"] == run.host
    ]  # fmt: skip
    down_since = max([t for t in (last_progress, *beats) if t is not None], default=now)
    facts: dict[str, Any] = {
        "interrupted_run": run.id,
        "started_at": run.started_at,
        "last_progress": last_progress,
        "down_since": down_since,
    }
    if cause is not None:
        facts["cause"] = cause
    if down_until_now:
        facts.update(now=now, down_seconds=max(0.0, now - down_since))
    return facts

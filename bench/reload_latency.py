"""Live reload latency: from writing a new agent folder into a running scheduler's project to the
agent being runnable (the control API lists it), with inotify and with the polling fallback
(``AL_RELOAD_POLL_SECONDS=1``), and to the first fire of its ``every = "2s"`` schedule.

A real ``al start`` process (scripted provider, host-user runtime); each trial adds one agent.
The figure is the median of the trials.

    python bench/reload_latency.py [--trials N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from llamaherd.testing import OfflineProject, SchedulerProcess, wait_until


def trial(project: OfflineProject, running: SchedulerProcess, name: str) -> tuple[float, float]:
    """Seconds until the new agent is listed, and until its schedule fired."""
    store = project.store()
    try:
        written = time.monotonic()
        project.add_scripted_agent(name, 'every = "2s"\n')
        wait_until(
            lambda: name in {r["agent"] for r in running.get("/control/stat").json()["agents"]},
            30,
            interval=0.01,
        )
        listed = time.monotonic() - written
        wait_until(lambda: store.runs(agent=name, limit=1), 30, interval=0.01)
        return listed, time.monotonic() - written
    finally:
        store.close()


def measure(trials: int, env: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        project = OfflineProject(Path(tmp) / "proj", creds=Path(tmp) / "creds", env=env)
        project.add_scripted_agent("first")
        running = SchedulerProcess(project)
        try:
            results = [trial(project, running, f"new{i}") for i in range(trials)]
        finally:
            running.stop()
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    polled, _ = measure(args.trials, {"AL_RELOAD_POLL_SECONDS": "1"})
    listed, fired = measure(args.trials, {})
    print(
        f"live reload: new agent runnable after {listed * 1000:.0f} ms (inotify), "
        f"{polled * 1000:.0f} ms (polling each second); its every=2s schedule fired after "
        f"{fired:.1f} s "
        f"(median of {args.trials})"
    )


if __name__ == "__main__":
    main()

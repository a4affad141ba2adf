"""What the flood tests of a run's write budget share (``test_run_flood.py``,
``test_write_floods.py``): a flood goes on until ``AFTER_BUDGET`` seconds after the budget's
notice, not for a fixed time, so a slow machine still sees the budget spent; ``.al`` is sampled
meanwhile and must not grow from a second after the notice until the flood ends."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from llamaherd.testing import OfflineProject, wait_until
from llamaherd.write_budget import CUT_RESERVE, MAX_RUN_BYTES, MAX_RUN_RECORDS

# What docs/security.md promises one run's writes take of .al at most (its budget, with the
# database's indexes, pages and write-ahead log): 40 MB.
DOCUMENTED_AL_GROWTH = 40 * 1000 * 1000
AFTER_BUDGET = 3  # seconds a flood goes on past the budget's notice (checked)


def al_size(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def data_size(database: Path) -> int:
    """The database's size as a reader sees it (its pages, the write-ahead log's included): it
    grows with what is stored, not when a checkpoint moves pages from the log to the file or
    the log is reused from its start."""
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
    finally:
        db.close()
    return pages * page_size


class Growth:
    """``.al``'s size and its database's data, sampled while a flood goes on."""

    def __init__(self, state: Path):
        self.state = state
        self.before = al_size(state)
        self.samples: list[tuple[float, int, int]] = []  # (time, .al size, data size)

    def sample(self) -> None:
        data = data_size(self.state / "work-queue.db")
        self.samples.append((time.time(), al_size(self.state), data))

    def check(self, spent_at: float, ended: float, after_budget: int = 2**20) -> int:
        """What the flood grew ``.al`` by at most, after checking the database's data stopped
        growing once the budget was spent (at ``spent_at``): from a second after until the
        flood ended (at ``ended``; at least ``AFTER_BUDGET`` seconds later) by less than
        ``after_budget``. Not the files' sizes: a checkpoint then still moves what was written
        before into the database file, and the write-ahead log grows with what a run may still
        change in place past its budget (its status, its latest return value) until it is
        written again from its start."""
        grown = max(size for _, size, _ in self.samples) - self.before
        assert grown < DOCUMENTED_AL_GROWTH, (grown, self.samples)
        after = [(at, data) for at, _, data in self.samples if spent_at + 1 <= at <= ended]
        assert after and after[-1][0] - after[0][0] >= AFTER_BUDGET, (spent_at, self.samples)
        assert after[-1][1] - after[0][1] < after_budget, (spent_at, self.samples)
        return grown


def notice_at(project: OfflineProject, run_id: str) -> float:
    """When the run's one ``write_budget`` notice was recorded, after checking there is one,
    and that what the store holds of the run is within its budget (give or take the notice
    and the messages kept cut past it)."""
    store = project.store()
    try:
        events = store.events(run_id)
        records, size = store.run_writes(run_id)
    finally:
        store.close()
    notices = [e for e in events if e["type"] == "write_budget"]
    assert len(notices) == 1, [e["type"] for e in events][-20:]
    assert records <= MAX_RUN_RECORDS + 2, records
    assert size <= MAX_RUN_BYTES + CUT_RESERVE + 4096, size
    return notices[0]["at"]


def watch_run(
    project: OfflineProject, agent: str, growth: Growth, stop: Path, seconds: float = 150
) -> Any:
    """Start a run of ``agent`` and wait for its end, sampling ``growth`` meanwhile; create
    ``stop`` (its flood ends) ``AFTER_BUDGET`` and a bit seconds after the budget's notice."""
    assert project.al("run", agent, "--no-follow").returncode == 0
    store = project.store()
    db = sqlite3.connect(f"file:{project.root / '.al' / 'work-queue.db'}?mode=ro", uri=True)
    notice = "SELECT 1 FROM run_events WHERE type = 'write_budget'"
    spent: list[float] = []
    try:

        def ended() -> Any:
            growth.sample()
            if not spent and db.execute(notice).fetchone():
                spent.append(time.monotonic())
            if spent and time.monotonic() > spent[0] + AFTER_BUDGET + 1.5:
                stop.touch()
            return next((r for r in store.runs(agent=agent) if r.state != "running"), None)

        return wait_until(ended, seconds, interval=0.2, what=f"{agent} ended")
    finally:
        db.close()
        store.close()

"""What one run may write to the store is bounded: ``llamaherd.write_budget``.

Past the run's budget (records and bytes of events, status messages and tool output kept),
events are dropped, a status replaces the current one without history, a return value is set
without its event, and one ``write_budget`` event says so. The budget is the run's, not a
process's: a process that first writes for a run counts what the store already holds of it.
The flood test beside ``test_setenv_limits.py`` drives the real limits through a scheduler.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaherd import write_budget
from llamaherd.session import ActiveRun
from llamaherd.skills.signals import return_value, set_status
from llamaherd.store import Store
from llamaherd.testing import OfflineProject


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(write_budget, "MAX_RUN_RECORDS", 30)
    monkeypatch.setattr(write_budget, "MAX_RUN_BYTES", 64 * 1024)


def _run(tmp_path: Path) -> tuple[ActiveRun, Store]:
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("chatty", "", '[[turns]]\ntext = "done"\n')
    loaded = project.load()
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    row = store.create_run("chatty", "manual")
    return ActiveRun(row.id, loaded.agent("chatty"), None, store), store


def test_past_the_budget_events_and_status_history_stop_with_one_notice(tmp_path, small):
    ctx, store = _run(tmp_path)
    for i in range(200):
        set_status(ctx, {"text": f"step {i} " + "x" * 500})
        ctx.log("assistant", {"text": f"turn {i}"})
    return_value(ctx, {"value": {"result": "kept"}})
    records, size = store.run_writes(ctx.run_id)
    events = store.events(ctx.run_id)
    notices = [e for e in events if e["type"] == "write_budget"]
    assert len(notices) == 1 and "as much as one run may" in notices[0]["data"]["message"]
    assert records <= write_budget.MAX_RUN_RECORDS + 2  # its first state event and the notice
    assert size <= write_budget.MAX_RUN_BYTES + 1024
    assert len(store.status_messages(ctx.run_id)) < 40
    run = store.get_run(ctx.run_id)
    assert run.status == "step 199 " + "x" * 500, "the current status still changes"
    assert run.return_value == {"result": "kept"}
    assert not [e for e in events if e["type"] == "return"], "its event is dropped"


def test_the_budget_counts_what_the_store_holds_of_the_run(tmp_path, small):
    """A second ActiveRun of the same run (a restart, another host, a resumed run) does not
    start from zero."""
    ctx, store = _run(tmp_path)
    for i in range(20):
        ctx.log("assistant", {"text": f"turn {i}"})
    again = ActiveRun(ctx.run_id, ctx.agent, None, store)
    for i in range(20):
        again.log("assistant", {"text": f"more {i}"})
    kinds = [e["type"] for e in store.events(ctx.run_id)]
    assert kinds.count("write_budget") == 1
    assert kinds.count("assistant") == write_budget.MAX_RUN_RECORDS - 1  # and the state event


def test_a_budget_refuses_everything_once_spent():
    budget = write_budget.WriteBudget()
    assert budget.take(write_budget.MAX_RUN_BYTES - 10)
    assert not budget.take(100)
    assert not budget.take(1), "a small write after a refused one is refused too"
    assert budget.notice_due() and not budget.notice_due()
    assert budget.dropped == 2

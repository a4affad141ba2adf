"""What one run may write to the store is bounded: ``llamaherd.write_budget``.

Past the run's budget (records and bytes of everything it writes), events are dropped, a status
replaces the current one without history, a return value is set without its event, a new lock
is refused (one it holds is extended), the transcript keeps each new message cut (model text,
tool-call arguments, tool output) until the cut ones pass their reserve, and then the run
stops; one ``write_budget`` event says so. The budget is the run's, not a process's: a process
that first writes for a run counts what the store already holds of it. The flood tests
(``test_run_flood.py``, ``test_write_floods.py``) drive the real limits through a scheduler.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaherd import write_budget
from llamaherd.budgets import BUDGET_EXIT
from llamaherd.session import (
    ARGUMENTS_CUT,
    OUTPUT_CUT,
    TRANSCRIPT_CUT,
    TRANSCRIPT_FULL,
    ActiveRun,
    Session,
)
from llamaherd.skills.locks import acquire_lock
from llamaherd.skills.signals import return_value, set_status
from llamaherd.store import Store
from llamaherd.testing import OfflineProject
from llamaherd.types import Reply, ToolCall


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


def test_past_the_budget_a_new_lock_is_refused_and_a_held_one_extended(tmp_path, small):
    ctx, store = _run(tmp_path)
    taken = [acquire_lock(ctx, {"uri": f"lock://{i}/" + "u" * 1500}) for i in range(40)]
    refused = [answer for answer in taken if not answer["ok"]]
    assert refused and "as much as one run may" in refused[0]["error"]
    held = [lock["uri"] for lock in store.locks()]
    assert 0 < len(held) < 40 and len(held) + len(refused) == 40
    again = acquire_lock(ctx, {"uri": held[0], "ttl_seconds": 5000})
    assert again["ok"] and "extended" in again["note"]
    assert [e["type"] for e in store.events(ctx.run_id)].count("write_budget") == 1


class _Chain:
    """A model chain answering ``turns`` turns of ``size`` characters (text and a ``say``
    call's message), then "done"."""

    def __init__(self, turns: int, size: int):
        self.turns, self.size, self.sent = turns, size, []

    def complete(self, messages, tools, options) -> Reply:
        self.sent.append(sum(len(m.content) for m in messages))
        turn = len(self.sent)
        if turn > self.turns:
            return Reply("done")
        say = ToolCall(f"c{turn}", "say", {"message": f"{turn} " + "s" * self.size})
        return Reply(f"turn {turn} " + "t" * self.size, [say])


def test_past_the_budget_the_transcript_keeps_new_messages_cut(tmp_path, small):
    """Model text and tool-call arguments are charged as they are added; past the budget
    each is kept cut, in the store and in what the model is sent again."""
    ctx, store = _run(tmp_path)
    chain = _Chain(turns=30, size=5_000)
    session = Session.start(ctx, chain, "system", "user", tools={})
    assert session.run().state == "done"
    stored = store.get_run(ctx.run_id).transcript
    assistant = [m for m in stored if m["role"] == "assistant"]
    assert assistant[0]["content"].endswith("t" * 1000), "what fits the budget is whole"
    cut = assistant[-2]
    assert cut["content"].endswith(f"[{TRANSCRIPT_CUT}]") and len(cut["content"]) < 2_200
    assert list(cut["tool_calls"][0]["arguments"]) == [ARGUMENTS_CUT]
    sent = [m for m in session.messages if m["role"] == "assistant"]
    assert sent[-2] == cut, "the model is sent the cut message too"
    # What the model is sent grows by the cut pieces alone: 5,000 characters a turn before.
    assert (chain.sent[-1] - chain.sent[-11]) / 10 < 2 * 2_200, chain.sent
    records, size = store.run_writes(ctx.run_id)
    assert size <= write_budget.MAX_RUN_BYTES + write_budget.CUT_RESERVE
    kinds = [e["type"] for e in store.events(ctx.run_id)]
    assert kinds.count("write_budget") == 1


def test_when_the_cut_messages_pass_their_reserve_the_run_stops(tmp_path, small, monkeypatch):
    monkeypatch.setattr(write_budget, "CUT_RESERVE", 20_000)
    ctx, store = _run(tmp_path)
    chain = _Chain(turns=1000, size=20_000)
    outcome = Session.start(ctx, chain, "system", "user", tools={}).run()
    assert (outcome.state, outcome.exit_code, outcome.reason) == (
        "error",
        BUDGET_EXIT,
        TRANSCRIPT_FULL,
    )
    assert len(chain.sent) < 20, "it stopped soon after the reserve was spent"
    stored = store.get_run(ctx.run_id).transcript
    last = stored[-1]  # the last call was not run
    assert last["role"] == "tool" and last["content"].startswith("not run: write budget")
    _, size = store.run_writes(ctx.run_id)
    assert size <= write_budget.MAX_RUN_BYTES + 20_000 + 4096


def test_a_tool_output_past_the_budget_is_kept_cut(tmp_path, small):
    ctx, store = _run(tmp_path)
    session = Session.start(ctx, _Chain(0, 0), "s" * 70_000, "user", tools={})
    session.messages.append({"role": "tool", "content": "o" * 20_000, "tool_call_id": "c"})
    session.checkpoint()
    [tool] = [m for m in store.get_run(ctx.run_id).transcript if m["role"] == "tool"]
    assert tool["content"].endswith(f"[{OUTPUT_CUT}]") and len(tool["content"]) < 2_200

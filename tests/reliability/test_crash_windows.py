"""``kill -9`` exactly inside the two crash windows of issue 18 item 15, not at a random moment.

The scheduler process imports a ``sitecustomize`` (on its ``PYTHONPATH``) that wraps one store
method: once the method's statement has run (inside its transaction, when the caller opened
one) the process SIGKILLs itself, at the Nth call. Then a normal scheduler starts on the same
database and the window's invariant is checked:

- cron: ``claim_tick`` then the tick's enqueue. They are one transaction (``Engine.emit_once``):
  the tick is neither claimed nor queued, and the restarted scheduler's catch-up fires it, once.
- calls: ``create_call`` then the callee's enqueue. One transaction too (``call_agent``): no
  call is left pending without a work item that would settle it.
"""

from __future__ import annotations

import contextlib
import json
import textwrap
from pathlib import Path
from typing import Any

import requests

from llamaherd.testing import OfflineProject, wait_until

from .test_crash_consistency import CALLEE, CALLER

EPOCH = 1_900_000_020.0  # fake clock start: a minute's tick (it fires at start)
KILLER = """
    import json, os, signal
    from pathlib import Path

    from llamaherd.store import Store

    _name, _nth, *_only = os.environ["AL_TEST_KILL_AFTER"].split(":")
    _original = getattr(Store, _name)
    _calls = []


    def _killing(self, *args, **kwargs):
        result = _original(self, *args, **kwargs)
        if _only != ["taken"]:
            _calls.append(args)
        else:  # ":taken": count what was taken (claim_many takes several at once)
            _calls.extend([args] * (len(result) if isinstance(result, list) else bool(result)))
        if len(_calls) >= int(_nth):
            Path(os.environ["AL_TEST_KILLED"]).write_text(json.dumps(args, default=str))
            os.kill(os.getpid(), signal.SIGKILL)
        return result


    setattr(Store, _name, _killing)
"""
TICKER = """
[[turns]]
text = "ticked"
"""


def killing_env(
    tmp_path: Path, method: str, nth: int, only_taken: bool = False
) -> tuple[dict[str, str], Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(KILLER))
    killed = tmp_path / "killed.json"
    when = f"{method}:{nth}:taken" if only_taken else f"{method}:{nth}"
    env = {"PYTHONPATH": str(site), "AL_TEST_KILL_AFTER": when}
    return {**env, "AL_TEST_KILLED": str(killed)}, killed


def advance(clock: Path, seconds: float) -> None:
    tmp = clock.with_suffix(".tmp")
    tmp.write_text(repr(float(clock.read_text()) + seconds))
    tmp.replace(clock)


def runs_of(helpers: Any, db: Path, agent: str) -> list[dict[str, Any]]:
    rows = helpers.read_db(db, "SELECT state, trigger FROM runs WHERE agent = ?", (agent,))
    return [{"state": state, "trigger": json.loads(trigger or "{}")} for state, trigger in rows]


def test_kill9_between_claim_tick_and_enqueue_loses_no_tick(tmp_path, scheduler, helpers):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("ticker", 'every = "60s"\n', TICKER)
    clock = tmp_path / "clock"
    clock.write_text(repr(EPOCH))
    env = {"AL_FAKE_CLOCK_FILE": str(clock)}
    kill_env, killed = killing_env(tmp_path, "claim_tick", 2)
    db = project.root / ".al" / "work-queue.db"

    doomed = scheduler(project, {**env, **kill_env})  # the tick due at start: claimed and run
    wait_until(lambda: [r for r in runs_of(helpers, db, "ticker") if r["state"] == "done"], 30)
    advance(clock, 60)  # the next: killed right after its claim_tick
    assert doomed.proc.wait(30) == -9, doomed.read_log()[-2000:]
    _key, tick = json.loads(killed.read_text())
    assert tick == EPOCH + 60

    scheduler(project, env)  # catch-up from the last claimed tick: the one killed
    done = wait_until(
        lambda: [r for r in runs_of(helpers, db, "ticker") if r["state"] == "done"][1:], 30
    )
    ticks = [r["trigger"]["payload"]["tick"] for r in runs_of(helpers, db, "ticker")]
    assert ticks.count(tick) == 1 and len(done) == 1, ticks
    claimed = helpers.read_db(db, "SELECT tick FROM trigger_ticks")
    assert sorted(t for (t,) in claimed) == sorted(ticks), "every claimed tick ran, once"


def test_kill9_between_create_call_and_enqueue_leaves_no_call_pending(tmp_path, scheduler, helpers):
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("caller", "", CALLER)
    project.add_scripted_agent("callee", "", CALLEE)
    kill_env, killed = killing_env(tmp_path, "create_call", 1)
    db = project.root / ".al" / "work-queue.db"

    doomed = scheduler(project, kill_env)
    assert project.al("run", "caller", "--no-follow").returncode == 0
    assert doomed.proc.wait(30) == -9, doomed.read_log()[-2000:]
    assert killed.exists()

    scheduler(project)  # adopts the caller's run (or reruns it): it ends
    wait_until(
        lambda: (
            helpers.read_db(db, "SELECT state FROM runs WHERE agent = 'caller'")
            and not helpers.read_db(
                db,
                "SELECT id FROM runs WHERE state IN ('running', 'waiting') UNION "
                "SELECT id FROM work_items WHERE state = 'queued'",
            )
        ),
        60,
        what="the caller's run ended and nothing is left queued",
    )
    calls = helpers.read_db(db, "SELECT id, state FROM calls")
    items = {i for (i,) in helpers.read_db(db, "SELECT call_id FROM work_items")}
    pending = [(i, state) for i, state in calls if state == "pending" and i not in items]
    assert not pending, f"calls pending with no work item to settle them: {pending} of {calls}"


QUICK = """
[[turns]]
text = "done"
"""


def test_kill9_between_claim_and_sandbox_start_leaves_one_run_per_trigger(
    tmp_path, scheduler, helpers
):
    """Killed right after claiming two runs, before either started its sandbox: the restarted
    scheduler runs each of them as it is (they did nothing yet), so the history shows two runs
    that ended done, not two error/interrupted rows beside two recovery runs."""
    project = OfflineProject(tmp_path / "proj")
    project.add_scripted_agent("pair", "scale = 2\n", QUICK)
    kill_env, killed = killing_env(tmp_path, "claim_many", 2, only_taken=True)
    db = project.root / ".al" / "work-queue.db"

    doomed = scheduler(project, kill_env)
    assert doomed.post("/control/pause", {"agent": "pair"}).status_code == 200
    for _ in range(2):
        assert doomed.post("/control/run", {"agent": "pair"}).status_code == 202
    with contextlib.suppress(requests.ConnectionError):  # it may die before it answers
        doomed.post("/control/resume", {"agent": "pair"})
    assert doomed.proc.wait(30) == -9, doomed.read_log()[-2000:]
    assert killed.exists()
    claimed = helpers.read_db(db, "SELECT id FROM runs WHERE agent = 'pair'")
    assert len(claimed) == 2, claimed

    scheduler(project)
    rows = wait_until(
        lambda: (
            rows
            if len(rows := helpers.read_db(db, "SELECT id, state, reason FROM runs")) >= 2
            and all(state == "done" for _, state, _ in rows)
            else None
        ),
        60,
        what="both runs ended done",
    )
    assert sorted(run_id for run_id, _, _ in rows) == sorted(i for (i,) in claimed), rows
    items = helpers.read_db(db, "SELECT state FROM work_items")
    assert sorted(items) == [("done",), ("done",)], items

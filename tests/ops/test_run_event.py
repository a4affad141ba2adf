"""The ``run_event`` hook: every recorded run event reaches the plugins, in order, off the
run's thread; a slow or failing plugin never slows or breaks the run."""

from __future__ import annotations

import logging
import threading

import pytest

from llamaherd import hookimpl
from llamaherd.run_events import Fanout, flush
from llamaherd.testing import wait_until

SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo one" } }]

[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "echo two" } }]

[[turns]]
text = "done"
"""


class Recorder:
    """A plugin recording what it is given; ``gate`` (when set) holds each delivery."""

    def __init__(self, gate: threading.Event | None = None):
        self.events: list[tuple[str, str, dict, float, str]] = []
        self.gate = gate
        self.started: list[str] = []
        self.finished: list[str] = []

    @hookimpl
    def run_event(self, run, type, data, at):
        if self.gate is not None:
            self.gate.wait(30)
        self.events.append((run.run_id, type, data, at, threading.current_thread().name))

    @hookimpl
    def run_started(self, run):
        self.started.append(run.run_id)

    @hookimpl
    def run_finished(self, run, result):
        self.finished.append(result.state)


class Failing:
    @hookimpl
    def run_event(self, run, type, data, at):
        raise RuntimeError("observer bug")


def run_once(project, agent: str):
    """One manual run of ``agent`` in this process (so registered plugins see it)."""
    from llamaherd.agents import queue_manual
    from llamaherd.engine import Engine

    engine = Engine(project.load())
    try:
        engine.serve("127.0.0.1", 0)
        queue_manual(engine, agent, {})
        engine.dispatch()
        return wait_until(
            lambda: not engine.threads and engine.store.runs(agent=agent, limit=1)[0],
            60,
            what="the run to end",
        ), engine.store.events(engine.store.runs(agent=agent, limit=1)[0].id)
    finally:
        engine.stopping.set()
        engine.close()


@pytest.fixture
def agent(offline_project):
    offline_project.add_scripted_agent("obs", script=SCRIPT)
    return offline_project


def test_every_recorded_event_reaches_the_plugin_in_order(agent, registered_plugin):
    recorder = Recorder()
    registered_plugin(recorder, "recorder")
    run, stored = run_once(agent, "obs")
    assert run.state == "done"
    assert flush(10)
    # The run's own log, but for what the store writes itself (state changes, return values).
    logged = [e for e in stored if e["type"] not in ("state", "return")]
    assert [(t, d) for _, t, d, _, _ in recorder.events] == [(e["type"], e["data"]) for e in logged]
    assert {run_id for run_id, *_ in recorder.events} == {run.id}
    assert [t for _, t, *_ in recorder.events].count("tool_call") == 2
    model_calls = [d for _, t, d, *_ in recorder.events if t == "model_call"]
    assert len(model_calls) == 3 and all("cost_usd" in d for d in model_calls)
    for (_, _, _, at, _), event in zip(recorder.events, logged, strict=True):
        assert abs(at - event["at"]) < 5
    assert {thread for *_, thread in recorder.events} == {"al-run-events"}
    assert recorder.started == [run.id] and recorder.finished == ["done"]


def test_a_slow_plugin_does_not_hold_the_run(agent, registered_plugin):
    gate = threading.Event()
    slow = Recorder(gate)
    registered_plugin(slow, "slow")
    try:
        run, stored = run_once(agent, "obs")  # ends while every delivery is held
        assert run.state == "done" and slow.events == []
    finally:
        gate.set()
    assert flush(10)
    assert len(slow.events) == len([e for e in stored if e["type"] not in ("state", "return")])


def test_a_failing_plugin_is_a_warning_and_the_others_still_get_events(
    agent, registered_plugin, caplog
):
    recorder = Recorder()
    registered_plugin(Failing(), "failing")
    registered_plugin(recorder, "recorder")
    with caplog.at_level(logging.WARNING, logger="llamaherd.run_events"):
        run, _ = run_once(agent, "obs")
        assert flush(10)
    assert run.state == "done"
    assert [t for _, t, *_ in recorder.events].count("tool_call") == 2
    warnings = [r.getMessage() for r in caplog.records if "observer bug" in r.getMessage()]
    assert warnings == ["plugin 'failing' failed in run_event: RuntimeError: observer bug"]


def test_events_beyond_the_queue_are_dropped_with_a_warning(registered_plugin, caplog):
    gate, held = threading.Event(), threading.Event()

    class Held:
        @hookimpl
        def run_event(self, run, type, data, at):
            held.set()
            gate.wait(30)

    registered_plugin(Held(), "held")
    fanout = Fanout(size=2)
    with caplog.at_level(logging.WARNING, logger="llamaherd.run_events"):
        fanout.publish(None, "tick", {"n": 0})
        assert held.wait(10)  # the thread holds the first event
        for number in range(1, 6):  # two wait in the queue, three are dropped
            fanout.publish(None, "tick", {"n": number})
    gate.set()
    assert fanout.flush(10)
    assert fanout.dropped == 3
    (warning,) = [r.getMessage() for r in caplog.records]  # once a minute, not per event
    assert warning.startswith("run_event: 1 event(s) dropped so far")


def test_nothing_is_queued_without_a_run_event_plugin(monkeypatch):
    from llamaherd import run_events
    from llamaherd.plugins import PluginManager

    builtins_only = PluginManager(load_entrypoints=False)  # none implements run_event
    monkeypatch.setattr(run_events, "get_manager", lambda: builtins_only)
    fanout = Fanout(size=1)
    fanout.publish(None, "tick", {})
    fanout.publish(None, "tick", {})
    assert fanout.dropped == 0 and fanout._thread is None

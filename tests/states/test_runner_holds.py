"""The runner holds an agent on structural failures only: in one process, with a runtime
plugin whose ``prepare`` crashes (a bug, not a SandboxError) and the scripted model."""

from __future__ import annotations

from typing import Any

import pytest

from llamaherd import hookimpl

CONFIG = '[models.scripted]\nprovider = "scripted"\nmodel = "scripted"\n'


class CrashingRuntime:
    name = "crashing"
    description = "a runtime whose prepare has a bug"
    schema: dict[str, Any] = {}

    def prepare(self, agent: Any, project: Any = None) -> None:
        raise RuntimeError("boom in prepare")

    def start(self, spec: Any) -> Any:
        raise AssertionError("never reached: prepare crashes first")

    def attach(self, handle: Any, spec: Any) -> None:
        return None

    def cleanup_orphans(self, live: set[str], project: Any) -> int:
        return 0


class Plugin:
    @hookimpl
    def register_runtimes(self, register):
        register(CrashingRuntime())


@pytest.fixture
def engine(tmp_project, registered_plugin, monkeypatch, tmp_path):
    from llamaherd.engine import Engine

    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    registered_plugin(Plugin(), "crashing-runtime")
    tmp_project.config(CONFIG)
    tmp_project.add_agent("fragile", 'models = ["scripted"]\n[runtime]\ntype = "crashing"\n')
    eng = Engine(tmp_project.load())
    try:
        yield eng
    finally:
        eng.close()


def test_a_runner_crash_at_start_holds_the_agent(engine):
    row = engine.store.create_run("fragile", "manual")
    final = engine.runner.run(row)
    assert (final.state, final.reason) == ("error", "internal error: RuntimeError: boom in prepare")
    assert engine.store.agent_state("fragile") == "error"
    cause = engine.store.agent_events("fragile")[-1]["data"]["cause"]
    assert cause.startswith(f"run {row.id}: the runner crashed at start")
    # Held: a queued trigger is not claimed until a manual run (or `al state idle`) recovers it.
    from llamaherd.agents import queue_manual
    from llamaherd.types import TriggerEvent

    engine.emit(TriggerEvent(agent="fragile", kind="webhook", payload={}))
    assert engine.claim() is None
    queue_manual(engine, "fragile", {})
    assert engine.store.agent_state("fragile") == "idle" and engine.claim() is not None

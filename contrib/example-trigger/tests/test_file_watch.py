"""The example trigger on a real Engine: it emits one event per change of a watched file, and
only for the agents that configure `watch`."""

from __future__ import annotations

import sys
from pathlib import Path

from llamaherd.testing import wait_until

# The example is not installed in the dev venv (tests/foundation/test_contrib_install.py
# installs it for real): import it from its source tree.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from llamaherd_example_trigger import FileWatchTrigger, describe_triggers  # noqa: E402


def test_emits_when_a_watched_file_changes(tmp_project, started_trigger, tmp_path, monkeypatch):
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    watched = tmp_path / "errors.log"
    watched.write_text("")
    tmp_project.config("")
    tmp_project.add_agent("triage", f'watch = {{ paths = ["{watched}"], interval = 0.02 }}\n')
    tmp_project.add_agent("bystander", "")
    started = started_trigger(FileWatchTrigger(), tmp_project)
    assert [agent.name for agent in started.ctx.agents] == ["triage"]

    def changed() -> bool:
        # Grows the file until the poller (which starts by recording the file as it is) sees it.
        with watched.open("a") as fh:
            fh.write("boom\n")
        return bool(started.fired)

    wait_until(changed, timeout=10, what="an event for the change")
    event, _ = started.fired[0]
    assert (event.agent, event.kind, event.payload) == (
        "triage",
        "file_watch",
        {"path": str(watched)},
    )
    assert str(watched) in event.prompt
    assert started.engine.store.queue_depth().get("triage", 0) >= 1  # queued durably


def test_describes_the_watched_files_for_the_dashboard(tmp_project, tmp_path):
    tmp_project.config("")
    tmp_project.add_agent("triage", 'watch = { paths = ["/var/log/a", "/var/log/b"] }\n')
    tmp_project.add_agent("bystander", "")
    agents = tmp_project.load().agents
    (info,) = describe_triggers(agents["triage"], 0.0)
    assert (info.kind, info.summary, info.details) == (
        "file_watch",
        "/var/log/a, /var/log/b",
        {"interval": "5s"},
    )
    assert describe_triggers(agents["bystander"], 0.0) == []


def test_a_live_reload_restarts_it_with_the_new_agents(
    tmp_project, started_trigger, tmp_path, monkeypatch
):
    """Without ``reconfigure``, a live reload calls ``stop()`` then ``start(ctx)``: the new
    agent set is watched."""
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    watched = tmp_path / "errors.log"
    watched.write_text("")
    tmp_project.config("")
    tmp_project.add_agent("bystander", "")
    started = started_trigger(FileWatchTrigger(), tmp_project)
    assert started.ctx.agents == []
    tmp_project.add_agent("triage", f'watch = {{ paths = ["{watched}"], interval = 0.02 }}\n')
    started.engine.project = tmp_project.load()
    started.trigger.stop()
    started.trigger.start(started.ctx)

    def changed() -> bool:
        with watched.open("a") as fh:
            fh.write("boom\n")
        return bool(started.fired)

    wait_until(changed, timeout=10, what="an event for the new agent")
    assert started.fired[0][0].agent == "triage"

"""The example trigger on its own: it emits one event per change of a watched file."""

from __future__ import annotations

import queue
import sys
import time
from pathlib import Path
from types import SimpleNamespace

# The example is not installed in the dev venv (tests/foundation/test_contrib_install.py
# installs it for real): import it from its source tree.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from llamaherd_example_trigger import FileWatchTrigger  # noqa: E402


def test_emits_when_a_watched_file_changes(tmp_path):
    watched = tmp_path / "errors.log"
    watched.write_text("")
    events: queue.Queue = queue.Queue()
    agent = SimpleNamespace(
        name="triage", config={"watch": {"paths": [str(watched)], "interval": 0.02}}
    )
    trigger = FileWatchTrigger()
    trigger.start(None, [agent], events.put)
    try:
        time.sleep(0.05)
        watched.write_text("boom\n")
        event = events.get(timeout=2)
    finally:
        trigger.stop()
    assert (event.agent, event.kind, event.payload) == (
        "triage",
        "file_watch",
        {"path": str(watched)},
    )
    assert str(watched) in event.prompt

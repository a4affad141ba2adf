"""The ``describe_triggers`` hook: each installed plugin describes the triggers of its own that
an agent uses (what the dashboard's agent page lists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamaherd import hookimpl
from llamaherd.api import TriggerInfo, agent_triggers
from llamaherd.plugins import get_manager
from llamaherd.testing import TmpProject

NOW = 1_800_000_000.0  # a fixed "now": next fires are computed from it

PROJECT = """
[webhooks.hooks]
type = "generic"
allowUnsigned = true
"""


class Doorbell:
    """A third party's plugin: it describes a ``doorbell`` key of its own."""

    @hookimpl
    def describe_triggers(self, agent: Any, now: float) -> list[TriggerInfo] | None:
        if "doorbell" not in agent.config:
            return None
        return [TriggerInfo("doorbell", agent.config["doorbell"], {"loud": "yes"})]


def project(root: Path) -> Any:
    tmp = TmpProject(root)
    tmp.config(PROJECT)
    tmp.add_agent("ticker", 'every = "2m"\n')
    tmp.add_agent("nightly", 'schedule = "0 3 * * *"\ntimezone = "Europe/Berlin"\n')
    tmp.add_agent(
        "hooked",
        '[[webhooks]]\nsource = "hooks"\nevents = ["push", "tag"]\n\n'
        '[[webhooks]]\nsource = "hooks"\nevents = ["issue"]\n',
    )
    tmp.add_agent("manual", "")
    return tmp.load()


def test_every_trigger_is_described_with_its_next_fire(tmp_path: Path) -> None:
    agents = project(tmp_path).agents
    (every,) = agent_triggers(agents["ticker"], NOW)
    assert (every.kind, every.summary) == ("every", "2m")
    assert NOW < every.next_fire <= NOW + 120
    (nightly,) = agent_triggers(agents["nightly"], NOW)
    assert nightly.kind == "schedule" and nightly.summary == "0 3 * * *"
    assert nightly.details == {"timezone": "Europe/Berlin"}
    assert NOW < nightly.next_fire <= NOW + 86400
    hooks = agent_triggers(agents["hooked"], NOW)
    assert [(t.kind, t.summary, t.details) for t in hooks] == [
        ("webhook", "hooks", {"events": "push, tag"}),
        ("webhook", "hooks", {"events": "issue"}),
    ]
    assert agent_triggers(agents["manual"], NOW) == []


def test_a_plugin_describes_its_own_trigger_and_a_failing_one_is_skipped(
    tmp_path: Path, recwarn: Any
) -> None:
    class Broken:
        @hookimpl
        def describe_triggers(self, agent: Any, now: float) -> list[TriggerInfo]:
            raise RuntimeError("boom")

    tmp = TmpProject(tmp_path)
    tmp.add_agent("door", 'every = "1h"\n')
    agent = tmp.load().agents["door"]
    agent.config["doorbell"] = "front door"  # a key only this plugin knows
    manager = get_manager()
    manager.register(Doorbell(), "doorbell-test")
    manager.register(Broken(), "broken-test")
    try:
        kinds = {info.kind: info for info in agent_triggers(agent, NOW)}
    finally:
        manager.unregister("doorbell-test")
        manager.unregister("broken-test")
    assert kinds["doorbell"].summary == "front door"
    assert kinds["doorbell"].details == {"loud": "yes"}
    assert "every" in kinds  # the others still answered


def test_the_hook_is_the_one_way_a_trigger_is_described() -> None:
    """A trigger type's own ``describe(agent)`` was documented but never called: it is gone
    from the protocol, its docs and the built-in types, which describe through the hook."""
    from llamaherd.plugins import registry
    from llamaherd.types import OPTIONAL_MEMBERS, TriggerType

    assert "describe" not in OPTIONAL_MEMBERS[TriggerType]
    assert not [t.name for t in registry().trigger_types.values() if hasattr(t, "describe")]
    docs = Path(__file__).parents[2] / "docs"
    for page in ("plugin-hooks.md", "plugin-guide.md"):
        assert "describe(agent)" not in (docs / page).read_text(), page

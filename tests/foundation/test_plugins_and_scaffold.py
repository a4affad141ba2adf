"""The plugin manager's helpers and the `al new` scaffold's consistency with what is registered."""

from __future__ import annotations

import tomllib

from llamaherd import hookimpl
from llamaherd.plugins import PluginManager, get_manager
from llamaherd.session import BUILTIN_HANDLERS

SESSION_TOOLS = set(BUILTIN_HANDLERS)  # built into the session loop


class Raises:
    @hookimpl
    def register_commands(self, cli):
        raise RuntimeError("no commands today")


class Adds:
    @hookimpl
    def register_commands(self, cli):
        cli.append("mine")


def test_call_each_turns_a_failing_plugin_into_a_warning(capsys):
    manager = PluginManager(load_entrypoints=False)
    manager.register(Raises(), "raises")
    manager.register(Adds(), "adds")
    added: list[str] = []
    manager.call_each("register_commands", cli=added)
    assert added == ["mine"]
    assert (
        "warning: plugin 'raises' failed in register_commands: RuntimeError: no commands today"
        in capsys.readouterr().err
    )


def test_registered_plugin_fixture_unregisters(registered_plugin):
    registry = registered_plugin(Adds(), "adds-for-a-test")
    assert "adds-for-a-test" in get_manager().info
    assert registry is get_manager().registry()


class Watcher:
    """A trigger type built on another kind: it sees the webhook sources once all are in."""

    name = "watcher"
    description = "test"
    schema: dict = {}

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.seen: list[str] | None = None

    def start(self, ctx):
        pass

    def stop(self):
        pass

    def bind(self, registry):
        if self.fail:
            raise ValueError("cannot bind")
        self.seen = sorted(registry.webhook_sources)


class Source:
    name = "later"
    description = "a source registered after the trigger type"
    schema: dict = {}
    credential_type = None

    def verify(self, headers, body, secrets):
        return False

    def parse(self, headers, body):
        return {}


class Registers:
    def __init__(self, trigger):
        self.trigger = trigger

    @hookimpl
    def register_trigger_types(self, register):
        register(self.trigger)

    @hookimpl
    def register_webhook_sources(self, register):
        register(Source())


def test_bind_gets_the_complete_registry_and_a_failure_is_a_warning(capsys):
    manager = PluginManager(load_entrypoints=False)
    watcher, broken = Watcher(), Watcher(fail=True)
    broken.name = "broken"
    manager.register(Registers(watcher), "watches")
    manager.register(Registers(broken), "breaks")
    registry = manager.registry()
    # Bound when the trigger types are collected (on first use): every other kind it reads
    # is collected then.
    assert set(registry.trigger_types) >= {"watcher", "broken"}
    assert watcher.seen == ["later"]
    assert (
        "warning: plugin 'breaks' failed in bind: ValueError: cannot bind"
        in capsys.readouterr().err
    )


def test_scaffold_script_uses_only_tools_that_exist(al, tmp_path):
    assert al("new", str(tmp_path / "p")).returncode == 0
    script = tomllib.loads((tmp_path / "p" / "agents" / "hello" / "script.toml").read_text())
    names = {call["name"] for turn in script["turns"] for call in turn.get("tool_calls", [])}
    assert names <= SESSION_TOOLS | set(get_manager().registry().tools())
    assert "text" in script["turns"][-1]

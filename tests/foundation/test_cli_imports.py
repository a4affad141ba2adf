"""`al --help` stays cheap: the modules it imports (not its time, which depends on the machine).

Every command is listed from the command manifest (``llamaherd.command_manifest``), written by
the first `al` after an install: the web stack, the store, the scheduler, YAML, the plugin
manager, every command module and every plugin are imported only by the commands that use them.
Measured with ``python -X importtime``, the real interpreter start of `al`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llamaherd.testing import imported_by

# Top-level packages `al --help` must never import (each costs milliseconds to tens of them).
HEAVY = {
    "starlette", "uvicorn", "anyio", "asyncio", "httpx", "h11", "peewee", "playhouse", "yaml",
    "jsonschema", "croniter", "ssl", "http", "sqlite3", "tarfile", "difflib", "pluggy",
    "stevedore", "importlib.metadata", "email", "dataclasses", "subprocess",
}  # fmt: skip
# Core modules only the commands that need them import.
HEAVY_CORE = {
    "llamaherd.scheduler", "llamaherd.engine", "llamaherd.store", "llamaherd.project",
    "llamaherd.control", "llamaherd.gateway", "llamaherd.server", "llamaherd.runner",
    "llamaherd.session", "llamaherd.schema", "llamaherd.agents", "llamaherd.compat",
}  # fmt: skip
# What `al --help` may import besides what the bare interpreter does: click (and what it needs),
# pathlib, json, and of llamaherd only the CLI and its manifest (258 modules before the manifest).
HELP_BUDGET = 95
HELP_LLAMAHERD = {"llamaherd", "llamaherd.cli", "llamaherd.command_manifest"}


@pytest.fixture
def cache(tmp_path: Path) -> dict[str, str]:
    """An empty cache of its own: the first `al` writes the manifest there."""
    return {"XDG_CACHE_HOME": str(tmp_path / "cache")}


def al(*args: str, env: dict[str, str], extra_path: Path | None = None) -> str:
    path = os.pathsep.join(filter(None, [str(extra_path or ""), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "llamaherd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_imports_no_heavy_module(cache) -> None:
    al("--help", env=cache)  # writes the manifest
    modules = imported_by("--help", env=cache)
    assert "llamaherd.cli" in modules  # the measurement saw the CLI load
    heavy = {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY or m in HEAVY_CORE}
    assert not heavy, f"`al --help` imports {sorted(heavy)}: import them where they are used"


def test_help_imports_a_budgeted_set_of_modules(cache) -> None:
    al("--help", env=cache)
    modules = imported_by("--help", env=cache) - imported_by()
    ours = {m for m in modules if m.split(".")[0].startswith("llamaherd")}
    assert ours <= HELP_LLAMAHERD, f"`al --help` imports {sorted(ours - HELP_LLAMAHERD)}"
    assert len(modules) <= HELP_BUDGET, (
        f"`al --help` imports {len(modules)} modules beyond the interpreter's (budget "
        f"{HELP_BUDGET}): {sorted(modules)}"
    )


def test_stat_loads_only_its_own_command_module(cache, tmp_path) -> None:
    al("--help", env=cache)
    modules = imported_by("stat", "--help", env=cache)
    commands = {m for m in modules if m.startswith("llamaherd.commands.")}
    assert commands == {"llamaherd.commands.scheduler"}
    assert not {m for m in modules if m.split(".")[0] in {"pluggy", "stevedore"}}


PLUGIN = """
from llamaherd import hookimpl
import click


@hookimpl
def register_commands(cli):
    for name in {names!r}:
        cli.add_command(click.Command(name, help=f"The {{name}} command.", callback=lambda: print(name)))
"""


def _install(site: Path, names: list[str]) -> None:
    """A distribution ``al-extra`` with entry point ``extra`` adding commands ``names``."""
    site.mkdir(exist_ok=True)
    (site / "al_extra.py").write_text(textwrap.dedent(PLUGIN.format(names=names)))
    info = site / "al_extra-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: al-extra\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[llamaherd]\nextra = al_extra\n")


def test_a_new_or_changed_plugin_command_never_silently_disappears(cache, tmp_path) -> None:
    """Installing a plugin, or editing one, makes the next `al` write the manifest afresh; a
    command the manifest does not list (however it got there) still runs."""
    site = tmp_path / "site"
    site.mkdir()
    assert "hello" not in al("--help", env=cache, extra_path=site)
    _install(site, ["hello"])
    assert "The hello command." in al("--help", env=cache, extra_path=site)
    assert al("hello", env=cache, extra_path=site).strip() == "hello"
    _install(site, ["hello", "goodbye"])  # the plugin's module edited
    os.utime(site / "al_extra.py", ns=(1, 1))  # a different stamp, whatever the clock
    assert "The goodbye command." in al("--help", env=cache, extra_path=site)
    # A manifest that lost a command (written by an older al, say): asked for, it runs.
    manifest = next((tmp_path / "cache" / "llamaherd").glob("commands-*.json"))
    manifest.write_text(manifest.read_text().replace('"goodbye"', '"goodbye-old"'))
    assert al("goodbye", env=cache, extra_path=site).strip() == "goodbye"
    assert '"goodbye"' in manifest.read_text()


def test_builtin_plugins_add_no_commands() -> None:
    """The plugin manager imports built-ins only for hooks other than ``register_commands``."""
    import importlib

    from llamaherd.plugins import DEFAULT_PLUGINS

    adding = [
        name
        for name in DEFAULT_PLUGINS
        if hasattr(importlib.import_module(name), "register_commands")
    ]
    assert not adding, (
        f"built-in plugins adding commands: {adding} (add them in llamaherd.commands)"
    )


def test_another_import_path_keeps_a_manifest_of_its_own(cache, tmp_path) -> None:
    """Processes of one environment with different PYTHONPATHs (the test suite's plugins, a
    user's checkout) each keep their manifest instead of making the other's stale: `al stat`
    under one stays light whatever ran under the other."""
    site = tmp_path / "site"
    _install(site, ["hello"])
    al("--help", env=cache)
    assert "The hello command." in al("--help", env=cache, extra_path=site)
    modules = imported_by("stat", "--help", env=cache)
    assert not {m for m in modules if m.split(".")[0] in {"pluggy", "al_extra"}}
    assert len(list(Path(cache["XDG_CACHE_HOME"], "llamaherd").glob("commands-*.json"))) == 2

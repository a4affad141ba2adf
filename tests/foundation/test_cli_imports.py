"""`al --help` stays cheap: the modules it imports (not its time, which depends on the machine).

Every plugin's commands are listed, so every plugin is discovered; but the web stack, the
store, the scheduler, YAML and the built-in plugins' modules are imported only by the commands
that use them. Measured with ``python -X importtime``, the real interpreter start of `al`.
"""

from __future__ import annotations

import subprocess
import sys

# Top-level packages `al --help` must never import (each costs milliseconds to tens of them).
HEAVY = {
    "starlette", "uvicorn", "anyio", "asyncio", "httpx", "h11", "peewee", "playhouse", "yaml",
    "jsonschema", "croniter", "ssl", "http", "sqlite3", "tarfile", "difflib",
}  # fmt: skip
# Core modules only the commands that need them import.
HEAVY_CORE = {
    "llamaherd.scheduler", "llamaherd.engine", "llamaherd.store", "llamaherd.project",
    "llamaherd.control", "llamaherd.gateway", "llamaherd.server", "llamaherd.runner",
    "llamaherd.session", "llamaherd.schema", "llamaherd.agents", "llamaherd.compat",
}  # fmt: skip


def imported_by(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "llamaherd", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip() for line in lines[1:]}


def test_help_imports_no_heavy_module() -> None:
    modules = imported_by("--help")
    assert "llamaherd.cli" in modules  # the measurement saw the CLI load
    heavy = {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY_CORE}
    assert not heavy, f"`al --help` imports {sorted(heavy)}: import them where they are used"


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

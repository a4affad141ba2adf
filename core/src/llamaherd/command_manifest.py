"""The command manifest: which top-level ``al`` commands exist, their one-line helps and what
provides each (a core command module, or a plugin's ``register_commands``), so ``al --help``
lists every command and ``al stat`` runs one without importing the rest or any plugin.

It is written the first time ``al`` runs after an install (a full load of every command module
and plugin, as ``al`` did each time before) into the user's cache, one file per environment,
import path and plugin selection. Each run validates it with a few ``stat`` calls: the
modification times of every ``sys.path`` folder (installing or removing a distribution changes
its folder's) and of every module file its commands came from (an edited plugin). When
anything changed it is written afresh; when a command is asked for that it does not list,
everything is loaded and it is written afresh too: a new command never silently disappears.
"""

from __future__ import annotations

import binascii
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

FORMAT = 1
# Environment variables that change which plugins load: each selection has its own manifest.
PLUGIN_SELECTION = ("AL_PLUGINS", "AL_LOAD_PLUGINS", "AL_DISABLE_PLUGINS", "AL_NO_ENTRYPOINTS")
CORE = "core"  # a provider of kind core: a module whose ``register(cli)`` adds commands


def cache_path() -> Path | None:
    """Where this environment's manifest lives (None: no cache directory to use)."""
    if os.environ.get("XDG_CACHE_HOME"):
        folder = Path(os.environ["XDG_CACHE_HOME"]) / "llamaherd"
    elif os.environ.get("HOME"):
        folder = Path(os.environ["HOME"]) / ".cache" / "llamaherd"
    else:
        return None
    # Unset and empty differ: AL_LOAD_PLUGINS="" loads no entry-point plugin at all. The import
    # path too: processes of one environment with different PYTHONPATHs each keep their own.
    selection = [
        sys.prefix,
        sys.executable,
        *(repr(os.environ.get(n)) for n in PLUGIN_SELECTION),
        *sys.path[1:],
    ]
    digest = f"{binascii.crc32(chr(0).join(selection).encode()):08x}"  # no hashlib to load
    return folder / f"commands-{digest}.json"


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _path_stamps() -> dict[str, int | None]:
    """The import path's folders (not the first: the script's folder or the current one)."""
    return {entry: _mtime(entry) for entry in sys.path[1:] if entry}


def load() -> dict[str, Any] | None:
    """The manifest when it is still true of this environment, else None."""
    path = cache_path()
    if path is None:
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return None
    if manifest.get("paths") != _path_stamps():
        return None
    files = manifest.get("files") or {}
    if any(_mtime(name) != stamp for name, stamp in files.items()):
        return None
    return manifest


def write(group: click.Group, providers: dict[str, list[list[str]]], modules: set[str]) -> None:
    """Record ``group``'s commands (fully loaded), who provided each, and the files of
    ``modules`` (what a later run compares). Best effort: an unwritable cache only means the
    next ``al`` loads everything again."""
    path = cache_path()
    if path is None:
        return
    commands = {
        name: {
            "short_help": command.short_help,
            "help": command.help,
            "hidden": command.hidden,
            "deprecated": command.deprecated,
            "from": providers.get(name, []),
        }
        for name, command in group.commands.items()
    }
    files = {}
    for name in sorted(modules):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            files[file] = _mtime(file)
    manifest = {"format": FORMAT, "paths": _path_stamps(), "files": files, "commands": commands}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, path)
    except OSError:
        pass


def provide(group: click.Group, provider: list[str]) -> None:
    """Add what one provider adds to ``group``: a core module's ``register(cli)``, or a
    plugin module's ``register_commands(cli)`` called directly (no plugin manager)."""
    kind, module = provider
    loaded = importlib.import_module(module)
    if kind == CORE:
        loaded.register(group)
    else:
        loaded.register_commands(cli=group)


def stand_in(name: str, entry: dict[str, Any]) -> click.Command:
    """A command the manifest lists, for ``--help`` (click says of it what it would say of the
    real one), never run."""
    return click.Command(
        name,
        help=entry.get("help"),
        short_help=entry.get("short_help"),
        hidden=bool(entry.get("hidden")),
        deprecated=entry.get("deprecated") or False,
    )

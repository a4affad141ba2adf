"""Live reload: a running scheduler notices edits of ``config.toml`` and ``agents/`` and applies
them without a restart (``Scheduler.reload``). A refused config is judged again when what it
may have lacked appears (``Inputs``: a credential added, a plugin installed, a ``touch``).

``ConfigWatcher`` only says "something may have changed": through inotify (Linux) on the
project folder, ``agents/`` and each agent folder (never ``.al/``, which the scheduler itself
writes), blocked in ``poll`` until an event comes, so an idle scheduler is not woken by it;
where inotify cannot watch (another system, no inotify instance left, or
``AL_RELOAD_POLL_SECONDS`` set for a network file system whose remote edits inotify never sees),
by looking every ``POLL_SECONDS``. ``candidate`` loads the project afresh and decides what of it
may run: a problem in the project config refuses the whole change; a problem in one agent
refuses that agent's change only (its last good version keeps running, a new broken agent is not
added); everything else applies.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import logging
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.environments import load_project
from llamaherd.errors import ConfigError
from llamaherd.project import Project

log = logging.getLogger("llamaherd.reload")

POLL_SECONDS = 60.0  # the fallback's period (``AL_RELOAD_POLL_SECONDS`` sets another)
DEBOUNCE = 0.2  # seconds without an event before a reload: an editor's save is several events
DEBOUNCE_MAX = 1.0  # ... but no later than this after the first, while events keep coming
# Settings a running scheduler cannot change: they apply at the next `al start`.
RESTART_SETTINGS = {
    "database": lambda project: project.database_url,
    "[gateway] bind": lambda project: project.gateway["bind"],
    "[gateway] port": lambda project: project.gateway["port"],
    # The server's limits and the names its Host check accepts are fixed when it starts.
    "[gateway] url": lambda project: project.gateway.get("url"),
    "[gateway] maxConnections": lambda project: project.gateway["maxConnections"],
    "[gateway] headerTimeout": lambda project: project.gateway["headerTimeout"],
    "[gateway] bodyTimeout": lambda project: project.gateway["bodyTimeout"],
    "[gateway] bodyBudget": lambda project: project.gateway["bodyBudget"],
}

# inotify(7): what a watched folder reports (its entries created, written, moved, removed).
_IN_CHANGES = 0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
_IN_ONLYDIR, _IN_ISDIR, _IN_Q_OVERFLOW, _IN_IGNORED = 0x01000000, 0x40000000, 0x4000, 0x8000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, 0o2000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)


def is_config_path(root: Path, path: str) -> bool:
    """Whether ``path`` is (or may contain) a file the project's config is loaded from: the
    project ``config.toml`` or ``.env.toml``, an agent folder, its ``SKILL.md`` or
    ``config.toml``."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return False
    if parts in (("config.toml",), (".env.toml",)):
        return True
    return bool(parts) and parts[0] == "agents" and len(parts) <= 3


def poll_seconds() -> float | None:
    """``AL_RELOAD_POLL_SECONDS``: look this often instead of watching (None: watch)."""
    value = os.environ.get("AL_RELOAD_POLL_SECONDS")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(f"AL_RELOAD_POLL_SECONDS: expected seconds above 0, got {value!r}")
    return seconds


def input_folders() -> list[Path]:
    """Folders where what a refused config lacked may appear (``Inputs``): the credential
    store's (a credential added) and ``sys.path``'s (a plugin installed)."""
    from llamaherd.credentials import CredentialStore

    store = CredentialStore().root
    # A store not made yet: its nearest folder that exists, to see it made.
    here = next((d for d in (store, *store.parents) if d.is_dir()), store)
    return [here, *store.glob("*"), *store.glob("*/*"), *(Path(p or ".") for p in sys.path)]


class Inotify:
    """The folders of one project under inotify, and the ``input_folders``: which folder each
    watch is, what an event names. Raises OSError when inotify is unavailable."""

    def __init__(self, root: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self.fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.root = root
        self.folders: dict[int, Path] = {}
        self.inputs: set[Path] = set()
        self.watch_all()

    def watch(self, folder: Path) -> None:
        wd = self._add(self.fd, os.fsencode(folder), _IN_CHANGES | _IN_ONLYDIR)
        if wd >= 0:
            self.folders[wd] = folder
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOENT, errno.ENOTDIR):  # gone or not a folder: nothing to watch
            raise OSError(code, f"inotify cannot watch {folder}: {os.strerror(code)}")

    def watch_all(self) -> None:
        """The project folder, ``agents/``, every agent folder and the input folders (again
        after an overflow)."""
        self.watch_inputs()
        self.watch(self.root)
        agents = self.root / "agents"
        self.watch(agents)
        for entry in os.scandir(agents) if agents.is_dir() else ():
            if entry.is_dir():
                self.watch(Path(entry.path))

    def watch_inputs(self) -> None:
        self.inputs = set(input_folders())
        for folder in self.inputs:
            self.watch(folder)

    def read(self) -> bool:
        """Take the pending events (watching new agent folders); whether one may concern the
        config."""
        relevant = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return relevant
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
                offset += _EVENT.size + size
                relevant |= self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> bool:
        if mask & _IN_Q_OVERFLOW:  # events were lost: watch everything again and look
            self.watch_all()
            return True
        if mask & _IN_IGNORED:
            self.folders.pop(wd, None)
            return False
        folder = self.folders.get(wd)
        if folder is None:
            return False
        if folder in self.inputs:  # a credential or a distribution may have come or gone
            if mask & _IN_ISDIR:
                self.watch_inputs()
            return True
        path = folder / name if name else folder
        # A folder created or moved in is watched before the reload reads it: what is written
        # into it afterwards is an event of its own.
        agents = self.root / "agents"
        if mask & _IN_ISDIR and path == agents:
            self.watch_all()
        elif mask & _IN_ISDIR and folder == agents:
            self.watch(path)
        return is_config_path(self.root, str(path))

    def close(self) -> None:
        os.close(self.fd)


class ConfigWatcher:
    """A daemon thread calling ``on_change()`` after the project's config files may have
    changed, until ``stop`` is set and ``close()`` called. ``on_change`` compares contents
    itself, so a spurious call costs one digest of the config files."""

    def __init__(self, root: Path, on_change: Callable[[], None], stop: threading.Event):
        self.root = root
        self.on_change = on_change
        self.stop = stop
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._inotify: Inotify | None = None
        self._every = POLL_SECONDS
        self._thread = threading.Thread(target=self._run, name="al-reload", daemon=True)

    def start(self) -> ConfigWatcher:
        """Watch from now on (inotify is set up before this returns), in a daemon thread."""
        every = poll_seconds()
        if every is None:
            try:
                self._inotify = Inotify(self.root)
            except (OSError, AttributeError) as exc:  # no inotify here, or no instance left
                every = POLL_SECONDS
                log.info("live reload looks at the config every %gs (%s)", every, exc)
        else:
            log.info("live reload looks at the config every %gs (AL_RELOAD_POLL_SECONDS)", every)
        self._every = every
        self._thread.start()
        return self

    def close(self) -> None:
        """End the thread (``stop`` set or not), wait for it, release its descriptors."""
        self.stop.set()
        if self._wake_w < 0:
            return
        os.write(self._wake_w, b"x")
        if self._thread.ident is not None:
            self._thread.join(5)
        if not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1

    def _run(self) -> None:
        # One look first: an edit saved after the project was loaded but before the watches
        # were set up made no event.
        self._changed()
        if self._inotify is not None:
            try:
                self._watch(self._inotify)
                return
            except OSError as exc:  # out of inotify watches for a new agent folder
                self._every = POLL_SECONDS
                log.warning("live reload looks at the config every %gs (%s)", POLL_SECONDS, exc)
        while not self._sleep(self._every):
            self._changed()

    def _sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for ``close``; whether it came."""
        if self.stop.is_set():
            return True
        ready, _, _ = select.select([self._wake_r], [], [], seconds)
        return bool(ready) or self.stop.is_set()

    def _watch(self, inotify: Inotify) -> None:
        try:
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            poller.register(inotify.fd, select.POLLIN)
            first: float | None = None  # when the first event of a pending change came
            while not self.stop.is_set():
                timeout = None if first is None else DEBOUNCE * 1000
                ready = {fd for fd, _ in poller.poll(timeout)}
                if self._wake_r in ready:
                    return
                now = time.monotonic()
                if inotify.fd in ready and inotify.read() and first is None:
                    first = now
                quiet = not ready
                if first is not None and (quiet or now - first >= DEBOUNCE_MAX):
                    first = None
                    self._changed()
        finally:
            inotify.close()

    def _changed(self) -> None:
        try:
            self.on_change()
        except Exception:  # a reload must never end the watching
            log.exception("live reload failed")


class Inputs:
    """What the validity of a config depends on besides its files' contents: the files
    themselves (a ``touch`` asks for a new look), the credential store (a refusal may name a
    credential to add) and the installed distributions (a plugin's keys). ``changed()`` says
    which of them changed since it last looked."""

    def __init__(self, root: Path):
        self.root = root
        self._seen = self._look()

    def _look(self) -> dict[str, tuple[Any, ...]]:
        from llamaherd.credentials import CredentialStore
        from llamaherd.plugins import install_signature
        from llamaherd.status import config_signature

        return {
            "files": config_signature(self.root),
            "credentials": CredentialStore().signature(),
            "plugins": install_signature(),
        }

    def changed(self) -> set[str]:
        now = self._look()
        changed = {name for name, value in now.items() if value != self._seen[name]}
        self._seen = now
        return changed


@dataclass
class Candidate:
    """The project a reload would run, and what of the edit it refuses (``refused``: one
    ``al validate`` line each). ``project`` is None when the whole change is refused."""

    project: Project | None
    refused: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)  # agents whose last good version keeps running


def candidate(current: Project, registry: Any, overrides: dict[str, Any]) -> Candidate:
    """Load ``current``'s project from disk again (``overrides``: ``al start``'s gateway
    options) and judge it against the running one."""
    from llamaherd.schema import validate_project

    try:
        project = load_project(current.root, current.requested_environment)
    except ConfigError as exc:
        return Candidate(None, [str(exc)])
    apply_overrides(project, overrides)
    errors = [p for p in validate_project(project, registry) if p.is_error]
    if any(p.agent is None for p in errors):
        return Candidate(None, [str(p) for p in errors if p.agent is None])
    broken = {p.agent for p in errors if p.agent}
    agents = {name: agent for name, agent in project.agents.items() if name not in broken}
    kept = {name for name in broken if name in current.agents}
    for name in kept:  # the last good version, under the new project settings
        agents[name] = dataclasses.replace(current.agents[name], project=project)
    project.agents = dict(sorted(agents.items()))
    return Candidate(project, [str(p) for p in errors], kept)


def apply_overrides(project: Project, overrides: dict[str, Any]) -> None:
    """``al start --port/--bind/--expose`` over the ``[gateway]`` table of the config."""
    for key, value in overrides.items():
        project.config.setdefault("gateway", {})[key] = value


def keep_restart_settings(old: Project, new: Project) -> list[str]:
    """The settings that changed but apply only at the next start; ``new`` keeps the running
    values of them, so the running project says what runs."""
    changed = [name for name, value in RESTART_SETTINGS.items() if value(old) != value(new)]
    new.config["database"] = old.setting("database")
    apply_overrides(new, {"bind": old.gateway["bind"], "port": old.gateway["port"]})
    return changed


def changed_agents(old: Project, new: Project) -> tuple[list[str], list[str], list[str]]:
    """Agents (added, removed, changed) between two loaded projects."""
    added = sorted(set(new.agents) - set(old.agents))
    removed = sorted(set(old.agents) - set(new.agents))
    changed = sorted(
        name
        for name in set(old.agents) & set(new.agents)
        if _agent_files(old.agents[name]) != _agent_files(new.agents[name])
    )
    return added, removed, changed


def _agent_files(agent: Any) -> tuple[Any, ...]:
    return (agent.meta, agent.body, agent.config)

"""Live reload: a running scheduler notices edits of ``config.toml`` and ``agents/`` and applies
them without a restart (``Scheduler.reload``). A refused config is judged again when what it
may have lacked appears (``Inputs``: a credential added, a plugin installed, a ``touch``).

``ConfigWatcher`` only says "something may have changed": with ``watchfiles`` (inotify and its
kin) when it can watch the project, else by polling. ``candidate`` loads the project afresh and
decides what of it may run: a problem in the project config refuses the whole change; a
problem in one agent refuses that agent's change only (its last good version keeps running, a
new broken agent is not added); everything else applies.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.environments import load_project
from llamaherd.project import Project
from llamaherd.types import ConfigError

log = logging.getLogger("llamaherd.reload")

POLL_SECONDS = 1.0  # the polling fallback's period
# Even with watchfiles, look this often: inotify misses files written into a new folder
# before its watch is added (an agent folder copied in at once).
RECHECK_MS = 2000
DEBOUNCE_MS = 200  # an editor's save is several events: one reload for them all
# Settings a running scheduler cannot change: they apply at the next `al start`.
RESTART_SETTINGS = {
    "database": lambda project: project.database_url,
    "[gateway] bind": lambda project: project.gateway["bind"],
    "[gateway] port": lambda project: project.gateway["port"],
    # The server's limits and the names its Host check accepts are fixed when it starts.
    "[gateway] url": lambda project: project.gateway.get("url"),
    "[gateway] maxConnections": lambda project: project.gateway["maxConnections"],
    "[gateway] headerTimeout": lambda project: project.gateway["headerTimeout"],
}


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


class ConfigWatcher:
    """A daemon thread calling ``on_change()`` after the project's config files may have
    changed, until ``stop`` is set. ``on_change`` compares contents itself, so a spurious call
    costs one digest of the config files."""

    def __init__(self, root: Path, on_change: Callable[[], None], stop: threading.Event):
        self.root = root
        self.on_change = on_change
        self.stop = stop
        self._thread = threading.Thread(target=self._run, name="al-reload", daemon=True)

    def start(self) -> ConfigWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # no watchfiles, no inotify instances left, a gone directory
            if self.stop.is_set():
                return
            log.info("live reload polls the config every %gs (%s)", POLL_SECONDS, exc)
        while not self.stop.wait(POLL_SECONDS):
            self._changed()

    def _watch(self) -> None:
        import watchfiles

        # It logs every batch of changes at INFO: the scheduler's own writes would fill its log.
        logging.getLogger("watchfiles").setLevel(logging.WARNING)

        # Unfiltered: the scheduler itself writes under .al/ every second, and a change that a
        # filter dropped would neither yield nor let the timeout yield, so the recheck that
        # repairs a missed event would never come while the scheduler is busy.
        looked = time.monotonic()
        for changes in watchfiles.watch(
            self.root,
            watch_filter=None,
            debounce=DEBOUNCE_MS,
            stop_event=self.stop,
            raise_interrupt=False,
            rust_timeout=RECHECK_MS,
            yield_on_timeout=True,
        ):
            due = time.monotonic() - looked >= RECHECK_MS / 1000
            if due or any(is_config_path(self.root, path) for _, path in changes):
                looked = time.monotonic()
                self._changed()

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

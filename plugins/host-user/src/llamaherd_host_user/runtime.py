"""The ``host-user`` runtime: an agent's tool calls run as a separate OS user on this host."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import SandboxError, SandboxSpec
from llamaherd_host_user import identity as identities
from llamaherd_host_user import shared
from llamaherd_host_user.containment import (
    CGROUP_PARENT,
    CgroupContainment,
    ProcContainment,
    cgroup2_mount,
)
from llamaherd_host_user.layout import (
    ASIDE_SUFFIX,
    PRIVATE_SUFFIX,
    Layout,
    base_scope,
    held_by_other_live_process,
    run_bases,
    runs_base,
    safe_run_id,
)
from llamaherd_host_user.sandbox import Containment, HostUserSandbox
from llamaherd_host_user.staging import build_env, provision, provision_private

# How long a private area being made may lack its owner record before a sweep takes it: its
# maker writes the record right after creating it, so only a killed maker leaves it longer.
ASIDE_GRACE = 60.0

SCHEMA: dict[str, Any] = {
    "run_as": {
        "type": "string",
        "default": identities.DEFAULT_USER,
        "description": "OS user the agent's commands run as (`al setup host-user` creates it).",
    },
    "groups": {
        "type": "array",
        "items": {"type": "string"},
        "description": "Extra groups (names or gids) for the agent user's processes.",
    },
    "keepWorkdir": {
        "type": "boolean",
        "default": False,
        "description": "Keep /tmp/al-runs/<run-id>/ after the run (credentials are removed anyway).",
    },
}


@dataclass(frozen=True)
class Settings:
    """An agent's ``[runtime]`` table, for this runtime."""

    run_as: str
    groups: list[str]
    keep_workdir: bool
    where: str  # the agent's config file, for messages

    @classmethod
    def of(cls, agent: Any) -> Settings:
        table = agent.runtime if agent is not None else {}
        where = "config.toml"
        if agent is not None:
            with contextlib.suppress(Exception):
                where = agent.project.relative(agent.config_file)
        return cls(
            run_as=str(table.get("run_as", identities.DEFAULT_USER)),
            groups=[str(g) for g in table.get("groups", [])],
            keep_workdir=bool(table.get("keepWorkdir", False)),
            where=where,
        )


def _containment(layout: Layout, uid: int, cgroup: str | None = None) -> Containment:
    if cgroup is not None:
        path = Path(cgroup)
        if path.is_dir():
            return CgroupContainment(path)
    elif (created := CgroupContainment.create(layout.cgroup)) is not None:
        return created
    return ProcContainment(uid, layout.run_id)


class HostUserRuntime:
    """Runs each exec as the agent's OS user, contained in a per-run cgroup."""

    name = "host-user"
    description = (
        "Processes under a separate OS user on this host (working dir /tmp/al-runs/<run-id>/)."
    )
    schema = SCHEMA

    def prepare(self, agent: Any, project: Any = None) -> None:
        """Check that the agent's user exists and that we can switch to it."""
        settings = Settings.of(agent)
        identities.resolve(settings.run_as, settings.groups, settings.where)

    def validate(self, agent: Any, project: Any) -> list[str]:
        """``al validate``: a warning for each group as good as root (``groups``), and when
        the project's ``shared/`` files cannot be shown at /app/static/shared in this agent's
        runs (``shared.py``)."""
        warnings = []
        for group in Settings.of(agent).groups:
            found = identities.root_equivalent(group)
            if found is not None:
                name, what = found
                shown = name if name == group else f"{group} ({name})"
                warnings.append(
                    f"warning: groups: {shown}: {what}, so the agent's processes can take this "
                    "host or read its secrets; remove it unless the agent needs that"
                )
        why = shared.unavailable()
        if why is not None and (project.root / "shared").is_dir():
            warnings.append(
                f"warning: shared/: host-user runs of {agent.name} cannot see these files at "
                f"/app/static/shared: {why}"
            )
        return warnings

    def warnings(self, agent: Any, project: Any = None) -> list[str]:
        """Problems worth a warning in ``al validate`` that do not stop a run."""
        settings = Settings.of(agent)
        if settings.run_as != identities.current_user():
            return []
        return [
            f"{settings.where}: runtime.run_as: {settings.run_as!r} is the user running llamaherd, "
            "so the agent's commands run without isolation (they can read your files and "
            "credential store); for isolation create a user with `sudo al setup host-user` and "
            f'set run_as = "{identities.DEFAULT_USER}"'
        ]

    def start(self, spec: SandboxSpec) -> HostUserSandbox:
        """Create the working dir, stage credentials and commands, and return the sandbox."""
        settings = Settings.of(spec.agent)
        ident = identities.resolve(settings.run_as, settings.groups, settings.where)
        layout = Layout(runs_base(), safe_run_id(spec.run_id))
        if layout.private.exists() or layout.workdir.exists():
            _remove(layout, ident.uid)  # left over by a start that crashed half-way
        try:
            provision(layout, ident, spec, settings.keep_workdir)
            containment = _containment(layout, ident.uid)
        except OSError as exc:
            _remove(layout, ident.uid)
            raise SandboxError(f"host-user: cannot prepare run {spec.run_id}: {exc}") from None
        env = build_env(layout, ident, spec)
        return HostUserSandbox(layout, ident, containment, env, settings.keep_workdir)

    def attach(self, handle: dict[str, Any], spec: SandboxSpec | None) -> HostUserSandbox | None:
        """The sandbox of ``handle`` if its working dir still exists (after a restart)."""
        try:
            layout = Layout(Path(handle["base"]), safe_run_id(handle["run_id"]))
        except (KeyError, TypeError):
            return None
        if not layout.workdir.is_dir():
            return None
        ident = identities.resolve(
            handle["user"], Settings.of(spec.agent if spec else None).groups, "handle"
        )
        keep_workdir = bool(handle.get("keep_workdir"))
        if layout.private.is_dir():
            layout.write_owner(keep_workdir=keep_workdir)
        else:
            provision_private(layout, ident, spec, keep_workdir)
        containment = _containment(layout, ident.uid, handle.get("cgroup"))
        env = build_env(layout, ident, spec)
        return HostUserSandbox(layout, ident, containment, env, keep_workdir)

    def cleanup_orphans(self, live_run_ids: set[str], project: Any = None) -> int:
        """Remove ``project``'s sandboxes (processes, private area, working dir, cgroup) of runs
        not live, in every base of this user's runs (``run_bases``).

        Left alone: other projects' sandboxes (``/tmp/al-runs`` is shared by every project on
        the host, and ``live_run_ids`` speaks for one), live runs, sandboxes another running
        scheduler process owns, and working dirs kept with ``keepWorkdir``.
        """
        root = str(project.root) if project is not None else None
        bases = run_bases()
        removed = sum(self._clean_base(base, live_run_ids, root) for base in bases)
        self._remove_stray_cgroups(bases, live_run_ids)
        return removed

    @staticmethod
    def _clean_base(base: Path, live_run_ids: set[str], root: str | None) -> int:
        removed = 0
        for entry in os.scandir(base):
            if entry.name.startswith(".") and entry.name.endswith(ASIDE_SUFFIX):
                removed += _remove_stale_aside(
                    Layout(base, entry.name[1 : -len(ASIDE_SUFFIX)]), live_run_ids, root
                )
                continue
            if not entry.name.endswith(PRIVATE_SUFFIX):
                continue
            layout = Layout(base, entry.name[: -len(PRIVATE_SUFFIX)])
            if layout.run_id in live_run_ids:
                continue
            owner = layout.owner()
            if held_by_other_live_process(owner):
                continue
            if not owner:  # a cleanup killed after its last file: only the empty dir is left
                with contextlib.suppress(OSError):
                    os.rmdir(layout.private)
                continue
            if root is not None and owner.get("project") != root:
                continue
            uid = layout.workdir.stat().st_uid if layout.workdir.exists() else -1
            _remove(layout, uid, bool(owner.get("keep_workdir")))
            removed += 1
        return removed

    @staticmethod
    def _remove_stray_cgroups(bases: list[Path], live_run_ids: set[str]) -> None:
        """Remove the cgroups of runs in ``bases`` that are not live and whose private area is
        gone (a run killed between the two). Only those: a cgroup in another base's scope is
        another scheduler's, whose runs this one cannot see (another ``/tmp``)."""
        mount = cgroup2_mount()
        parent = mount / CGROUP_PARENT if mount else None
        if parent is None or not parent.is_dir() or os.geteuid() != 0:
            return
        for base in bases:
            scope = parent / base_scope(base)
            for entry in os.scandir(scope) if scope.is_dir() else ():
                stray = entry.is_dir() and entry.name not in live_run_ids
                if stray and not Layout(base, entry.name).private.exists():
                    CgroupContainment(Path(entry.path)).remove()


def _remove_stale_aside(layout: Layout, live_run_ids: set[str], root: str | None) -> int:
    """Remove the private area a start killed before its rename left (with the run's working
    dir: nothing ran in it yet), unless another live scheduler is making it now. Without an
    owner record its maker may be between creating it and writing one: left alone a while."""
    if layout.run_id in live_run_ids:
        return 0
    owner = layout.owner(layout.aside)
    if held_by_other_live_process(owner):
        return 0
    if root is not None and owner and owner.get("project") != root:
        return 0
    with contextlib.suppress(FileNotFoundError):
        if not owner and time.time() - layout.aside.stat().st_mtime < ASIDE_GRACE:
            return 0
        layout.remove()
        return 1
    return 0


def _remove(layout: Layout, uid: int, keep_workdir: bool = False) -> None:
    """Kill a run's processes and delete its cgroup, private area and working dir (unless
    kept)."""
    mount = cgroup2_mount()
    # In its base's scope, or (made by a version before scopes) right under the parent.
    found = [mount / CGROUP_PARENT / at for at in (layout.cgroup, layout.run_id)] if mount else []
    cgroup = next((path for path in found if path.is_dir()), None)
    if cgroup is not None:
        CgroupContainment(cgroup).remove()
    elif uid >= 0:
        ProcContainment(uid, layout.run_id).remove()
    layout.remove(keep_workdir)

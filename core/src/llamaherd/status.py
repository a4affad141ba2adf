"""What ``al stat``, the control API and the dashboard show about agents and runs.

Reads only the database and the project, so it works with or without a running scheduler and
across several scheduler hosts.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamaherd.errors import LlamaherdError

if TYPE_CHECKING:
    from llamaherd.types import Hold, TriggerInfo

log = logging.getLogger("llamaherd.status")

FINAL = ("done", "error", "timeout", "killed")
# Agent states an owner (or the agent itself) sets; ``suspended`` and ``error`` are the system's.
SETTABLE_STATES = ("idle", "hibernate", "off")
# What an owner may ask for (``llamaherd.agents.change_state``): also ``active`` (run now) and
# ``suspended`` (hold).
OWNER_STATES = (*SETTABLE_STATES, "active", "suspended")
# Every state ``al stat`` shows; the ones an owner cannot set are refused with the reason.
DISPLAY_STATES = (*OWNER_STATES, "error", "paused")


def next_fire(registry: Any, agent: Any, now: float) -> float | None:
    """The next scheduled fire of ``agent`` from any trigger type that can tell (``inf``: a
    schedule that never fires)."""
    for trigger in registry.trigger_types.values():
        fire = getattr(trigger, "next_fire", None)
        if fire is None:
            continue
        try:
            when = fire(agent, now)
        except Exception:  # a bad schedule is reported by `al validate`, not here
            when = None
        if when is not None:
            return when
    return None


def agent_rows(
    project: Any, store: Any, registry: Any, now: float | None = None
) -> list[dict[str, Any]]:
    """One row per agent: state, active/scale, queue depth, last run, next fire, hosts, and
    what its runtime says about where its runs go (``runtime``: lines)."""
    now = time.time() if now is None else now
    depth = store.queue_depth()
    paused_all, paused = store.paused()
    live = store.runs(states=("running", "waiting"), limit=10_000)
    states = store.agent_states()
    finished = store.last_finished(list(project.agents))
    rows = []
    for name, agent in project.agents.items():
        mine = [run for run in live if run.agent == name]
        running = [run for run in mine if run.state == "running"]
        stored = states.get(name, "idle")
        last_id, last_state, last_exit, last_at, last_started = finished.get(name, (None,) * 5)
        state = "active" if running else stored
        if stored == "idle" and (paused_all or name in paused):
            state = "paused"
        elif state == "idle" and mine:
            state = "waiting"  # its live runs all wait (wait_for_trigger, an answer)
        if agent.disabled and not running:
            state = "disabled"  # scale = 0: nothing fires, queues or runs
        fire = None if agent.disabled else next_fire(registry, agent, now)
        rows.append(
            {
                "agent": name,
                "state": state,
                "stored_state": stored,
                "active": len(running),
                "waiting": len(mine) - len(running),
                "scale": agent.scale,
                "queued": depth.get(name, 0),
                "last_run": last_id,
                "last_result": last_state,
                "last_exit": last_exit,
                "last_finished_at": last_at,
                "last_duration": _duration(last_at, last_started),
                # JSON has no infinity: a schedule that never fires is said apart.
                "next_fire": fire if fire != math.inf else None,
                "never_fires": fire == math.inf,
                "hosts": sorted({run.host for run in mine if run.host}),
                "runtime": runtime_status(registry, agent, store),
                **flow_fields(agent, store, registry),
            }
        )
    return rows


def runtime_status(registry: Any, agent: Any, store: Any) -> list[str]:
    """What the agent's runtime says about where its runs go (``Runtime.status``: a pool's
    load, a host that is down), one line each; [] when it says nothing or fails."""
    runtime = registry.runtimes.get(agent.runtime.get("type"))
    status = getattr(runtime, "status", None)
    if status is None:
        return []
    try:
        return [str(line) for line in status(agent, store) or []]
    except Exception as exc:  # a plugin's failure must not break `al stat`
        return [f"(runtime {runtime.name} could not tell: {type(exc).__name__}: {exc})"]


def hold_of(registry: Any, agent: Any, store: Any, now: float) -> Hold | None:
    """Whether an admission check (``register_admission_checks``) holds ``agent``'s queued runs
    now: its ``Hold``, the reason naming the check unless it is core's budget; None when none
    does. A check that raises holds nothing (logged)."""
    from llamaherd.types import Hold

    for check in getattr(registry, "admission_checks", {}).values():
        try:
            found = check.hold(agent, store, now)
        except Exception as exc:  # a plugin's failure must not stop the dispatcher
            log.warning("admission check %s failed: %s: %s", check.name, type(exc).__name__, exc)
            continue
        hold = found if isinstance(found, Hold) else Hold(found) if found else None
        if hold is not None and hold.reason:
            if check.name == "budget":
                return hold
            return Hold(f"{hold.reason} ({check.name})", hold.until)
    return None


def held_by(registry: Any, agent: Any, store: Any, now: float) -> str | None:
    """Why an admission check holds ``agent``'s queued runs now (``hold_of``), or None."""
    hold = hold_of(registry, agent, store, now)
    return None if hold is None else hold.reason


def flow_fields(agent: Any, store: Any, registry: Any) -> dict[str, Any]:
    """Why the agent's queued runs wait (``held``: an admission check, a budget), its flow
    control per key (``flow``) and its spend against its budgets (``budget``); only those
    that apply."""
    from llamaherd.budgets import budget_view
    from llamaherd.flow import flow_view

    fields: dict[str, Any] = {}
    now = store.clock()
    try:
        policy, budgets = agent.flow, agent.budgets
    except LlamaherdError:  # a broken [flow] or [budget]: `al validate` says why
        return fields
    held = held_by(registry, agent, store, now)
    if held:
        fields["held"] = held
    if policy is not None:
        fields["flow"] = flow_view(agent, store, now)
    if budgets:
        try:
            fields["budget"] = budget_view(agent, store, now)
        except LlamaherdError:  # an unknown `timezone`: `al validate` says so
            pass
    return fields


def _duration(finished_at: float | None, started_at: float | None) -> float | None:
    if started_at is None or finished_at is None:
        return None
    return max(0.0, finished_at - started_at)


def run_dict(run: Any) -> dict[str, Any]:
    """A run as JSON, without the transcript (large) or the token hash (secret-adjacent)."""
    data = asdict(run)
    data.pop("transcript", None)
    data.pop("token_hash", None)
    return data


def ago(then: float | None, now: float | None = None) -> str:
    if then is None:
        return "-"
    seconds = max(0, int((time.time() if now is None else now) - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def until(when: float | None, now: float | None = None) -> str:
    """ "in 3s" (whole seconds, rounded up: "in 0s" never shows while something is still to
    come), or "now" once ``when`` has come."""
    if when is None:
        return "-"
    left = when - (time.time() if now is None else now)
    if left <= 0:
        return "now"
    seconds = max(1, math.ceil(left - 1e-6))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"in {seconds // size}{unit}"
    return f"in {seconds}s"


# ---------------------------------------------------------------------- the scheduler


def config_digest(root: Path) -> str:
    """A digest of the files a scheduler loads its config from: the project ``config.toml``,
    ``.env.toml`` and each agent's ``SKILL.md`` and ``config.toml`` (names and contents). A
    scheduler records the one it loaded (``.al/scheduler.json``, its heartbeat); comparing it with the files on disk
    tells whether its config is current."""
    signature = config_signature(root)
    cached = _DIGESTS.get(root)
    if cached is not None and cached[0] == signature:
        return cached[1]  # no file changed since: `al stat` asks on every call
    from llamaherd.errors import ConfigError
    from llamaherd.project import read_project_file

    digest = hashlib.sha256()
    prefix = len(str(root)) + 1
    for found in signature:
        path = found[0]
        try:
            data = read_project_file(path)
        except ConfigError as exc:  # no project config.toml, one removed meanwhile, a FIFO...
            data = f"\0{exc.message}".encode()  # ...still a change when it comes or goes
        # The name as bytes: a folder name that is not UTF-8 is refused by the loader, and
        # must not end the look that notices it.
        digest.update(os.fsencode(path[prefix:]) + b"\0%d\0" % len(data))
        digest.update(data)
    _DIGESTS[root] = (signature, digest.hexdigest()[:16])
    return _DIGESTS[root][1]


_DIGESTS: dict[Path, tuple[tuple[Any, ...], str]] = {}  # root -> (files' signature, digest)


def config_signature(root: Path) -> tuple[Any, ...]:
    """Each config file's path, mtime, size and inode: changes on any write, ``touch`` too.
    Plain strings and ``os`` calls: at a scheduler's start and on every look of live reload,
    this is two ``stat`` calls per agent, and ``pathlib`` cost more than they do."""
    top = str(root)
    found = [_file_signature(os.path.join(top, name)) for name in ("config.toml", ".env.toml")]
    try:  # as glob's "agents/*/": not the hidden folders
        folders = [e.path for e in os.scandir(os.path.join(top, "agents")) if e.name[0] != "."]
    except OSError:  # no agents/ (yet)
        folders = []
    for folder in folders:
        for name in ("SKILL.md", "config.toml"):
            signature = _file_signature(os.path.join(folder, name), missing=None)
            if signature is not None:
                found.append(signature)
    return tuple(sorted(found))


def _file_signature(path: str, missing: Any = ()) -> Any:
    """(path, mtime, size, inode); (path,) when it cannot be read; ``missing`` (default
    (path,)) when nothing is there, not even a broken link."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return (path,) if missing == () or os.path.lexists(path) else missing
    except OSError:
        return (path,)
    return (path, found.st_mtime_ns, found.st_size, found.st_ino)


def scheduler_status(
    project: Any,
    info: dict[str, Any] | None,
    hosts: list[dict[str, Any]] = (),
    on_disk: str | None = None,
) -> dict[str, Any]:
    """Whether a scheduler serves ``project``: the one of this checkout (``info``, what it
    wrote in ``.al/scheduler.json``), else the latest of ``hosts`` (live schedulers of other
    machines heartbeating into a shared database, as ``store.hosts()`` lists them); since when,
    its llamaherd version, and whether the config it loaded is the one on disk here
    (``config_current``; None when it did not say), with the problems for which a live reload
    refused the files on disk (``config_errors``; ``kept``: the agents whose last good version
    runs, ``refused_all``: the whole change was refused), when it last reloaded
    (``reloaded_at``), and what failed in it (``problems``: a trigger that did not start, a
    plugin that did not load or was installed after it started). ``on_disk``: the digest of
    the files on disk when the caller knows it (a scheduler's own watcher), else they are read
    here."""
    where = "this machine"
    if info is None and hosts:
        latest = max(hosts, key=lambda h: h["heartbeat_at"])
        info = {**(latest["info"] or {}), "host": latest["host"]}
        where = "another host (shared database)"
    if info is None:
        return {"running": False}
    loaded = info.get("config_digest")
    if loaded is not None and on_disk is None:
        on_disk = config_digest(project.root)
    return {
        "running": True,
        "where": where,
        "host": info.get("host"),
        "pid": info.get("pid"),
        "url": info.get("url"),
        "since": info.get("started_at"),
        # While it loads its agents (``llamaherd.loading``): how far it got; else None.
        "loading": info.get("loading"),
        "version": info.get("version"),
        "config_current": None if loaded is None else loaded == on_disk,
        "config_errors": list(info.get("config_errors") or []),
        "kept": list(info.get("kept") or []),
        "refused_all": bool(info.get("refused_all")),
        "reloaded_at": info.get("reloaded_at"),
        "problems": list(info.get("problems") or []),
    }


def database_status(project: Any, store: Any) -> dict[str, Any]:
    """The database ``al stat`` names: where, its size in bytes, and how many days of
    history the scheduler keeps (``historyRetentionDays``: older runs are pruned hourly)."""
    where = store.url_display
    try:  # a SQLite file of the project: as the config names it (.al/work-queue.db)
        where = str(Path(where).relative_to(project.root))
    except ValueError:
        pass
    return {
        "where": where,
        "bytes": store.size(),
        "retention_days": project.setting("historyRetentionDays"),
    }


def size_text(size: int | None) -> str:
    """``1.4 MiB``."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def serving_status(engine: Any) -> dict[str, Any]:
    """``scheduler_status`` of the process serving ``engine`` (a foreground ``al run`` is
    none), with ``paused`` (the whole scheduler) and ``hosts``: every scheduler heartbeating
    into the database (several share a PostgreSQL one), as ``store.hosts()`` lists them."""

    identity = getattr(engine, "identity", None)
    info = None
    if identity is not None:
        info = {"host": engine.host, "pid": os.getpid(), "url": engine.gateway_url, **identity()}
    # A request thread never reads project files (a FIFO there once blocked every one): the
    # scheduler's config watcher keeps the digest of what is on disk.
    status = scheduler_status(engine.project, info, on_disk=getattr(engine, "disk_digest", None))
    status["paused"] = engine.store.paused()[0]
    status["hosts"] = [
        {"host": h["host"], "heartbeat_at": h["heartbeat_at"]} for h in engine.store.hosts()
    ]
    return status


def agent_triggers(agent: Any, now: float) -> list[TriggerInfo]:
    """Every trigger of ``agent`` the installed plugins describe (``describe_triggers``)."""
    from llamaherd.plugins import get_manager

    answers = get_manager().call_each("describe_triggers", agent=agent, now=now)
    return [info for answer in answers for info in answer]


def key_line(entry: dict[str, Any], now: float | None) -> str:
    """One key: "key 'acme#7': 2 active; debouncing 4 pending, fires in 1m12s"."""
    bits = []
    if entry.get("active"):
        bits.append(f"{entry['active']} active")
    if entry.get("debouncing"):
        bits.append(
            f"debouncing {entry['debouncing']} pending, fires {until(entry.get('fires_at'), now)}"
        )
    elif entry.get("queued"):
        bits.append(f"{entry['queued']} queued")
    if entry.get("throttled_until"):
        bits.append(f"throttled, next start {until(entry['throttled_until'], now)}")
    name = repr(entry["key"]) if entry["key"] else "(no key)"
    return f"key {name}: " + ("; ".join(bits) or "idle")


def budget_line(budget: dict[str, Any], now: float | None) -> str:
    """One budget: "budget daily (agent): $4.10 of $5.00 (82%), resets in 3h"."""
    from llamaherd.budgets import money

    limits = []
    if budget.get("limit_usd") is not None:
        spent = f"{money(budget['spent_usd'])} of " if "spent_usd" in budget else ""
        limits.append(f"{spent}{money(budget['limit_usd'])}")
    if budget.get("limit_tokens") is not None:
        spent = f"{budget['spent_tokens']:,} of " if "spent_tokens" in budget else ""
        limits.append(f"{spent}{budget['limit_tokens']:,} tokens")
    text = f"budget {budget['period']} ({budget['scope']}): " + ", ".join(limits)
    if "fraction" in budget:
        text += f" ({budget['fraction']:.0%}), resets {until(budget['resets_at'], now)}"
    if budget.get("unpriced_calls"):
        text += f"; {budget['unpriced_calls']} calls of unknown price"
    return text

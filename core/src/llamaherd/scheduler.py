"""The scheduler process (``al start``): triggers, the dispatcher, the HTTP server, recovery.

State lives in the database, so a restart loses nothing: queued items stay queued, waiting runs
keep waiting, and runs left ``running`` by a crash are adopted when their sandbox is still alive
or marked ``error`` (reason ``interrupted``) and requeued once with a recovery notice.

Several schedulers may share one PostgreSQL database (one project checkout per host, each with
the same ``database`` URL). Each heartbeats its row in the ``hosts`` table; when a host's
heartbeat stops changing for ``AL_HOST_STALE_AFTER`` seconds (default 15) the others treat its
``running`` runs as after a crash.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llamaherd import __version__
from llamaherd.clock import machine_name, sleep
from llamaherd.engine import HOLD_RECHECK, Engine
from llamaherd.errors import CommandFailed, LlamaherdError
from llamaherd.loading import Loading
from llamaherd.local import scheduler_info
from llamaherd.plugins import get_manager, installed_plugins
from llamaherd.processes import pid_alive
from llamaherd.reload import (
    ConfigWatcher,
    Inputs,
    apply_overrides,
    candidate,
    changed_agents,
    keep_restart_settings,
)
from llamaherd.statedir import open_private, secure
from llamaherd.status import config_digest
from llamaherd.triggers import agents_using
from llamaherd.types import EmitResult, TriggerEvent, TriggerType, fragment

log = logging.getLogger("llamaherd.scheduler")

HOUSEKEEPING_EVERY = 1.0  # with other hosts on the database (PostgreSQL)
# Alone on its database, nothing needs a pass sooner: work is claimed when it is queued (a
# wake-up), whatever becomes due by the clock has a timer (``Engine.timers``: waits, flow
# control, budgets, deferrals, pruning), and the heartbeat says how often it comes.
IDLE_HOUSEKEEPING_EVERY = 60.0
HOST_STALE_AFTER = 15.0  # a host that has not heartbeated for this long is presumed dead
PRUNE_EVERY = 3600.0
STORE_RETRY_AFTER = 1.0  # pause of the main loop after the database failed a pass
INVALID_CONFIG = "invalid config:"  # the cause of an agent held for its config at start
PLUGINS_CHANGED = "plugins"  # how the problem of plugins installed/removed since the start begins


def host_stale_after() -> float:
    """Seconds without a heartbeat after which a host is presumed dead ($AL_HOST_STALE_AFTER)."""
    value = os.environ.get("AL_HOST_STALE_AFTER")
    if not value:
        return HOST_STALE_AFTER
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > HOUSEKEEPING_EVERY:
        raise LlamaherdError(
            f"AL_HOST_STALE_AFTER: expected seconds above {HOUSEKEEPING_EVERY:g} "
            f"(the heartbeat period), got {value!r}"
        )
    return seconds


class SchedulerLock:
    """An exclusive flock on ``.al/scheduler.lock``: one scheduler per project directory."""

    def __init__(self, state_dir: Path):
        # Checked (and fixed) at every start: .al/ holds transcripts. What had to be made
        # private may have been read by others (``Engine.made_private``).
        self.made_private = secure(state_dir)
        self.path = state_dir / "scheduler.lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            info = scheduler_info(state_dir) or {}
            raise CommandFailed(
                f"another scheduler is already running for this project "
                f"(pid {info.get('pid', '?')}, {info.get('url', '?')}); stop it with `al stop`"
            ) from None

    def release(self) -> None:
        os.close(self.fd)


class HostWatch:
    """Which scheduler hosts stopped heartbeating, judged on this process's monotonic clock.

    A host is presumed dead once its heartbeat row has not changed for ``stale_after`` seconds
    (or three of the heartbeat periods it announces as ``every``, when longer) of our own time (as client-go's leader election judges a lease it observes), so clock skew
    between hosts, or a jump of the wall or fake clock, never makes a live host look dead. A
    host first seen less than ``stale_after`` ago is not judged yet. ``clock`` is that monotonic
    clock (tests pass their own)."""

    def __init__(self, stale_after: float, clock: Callable[[], float] = time.monotonic):
        self.stale_after = stale_after
        self._clock = clock
        self._seen: dict[str, tuple[Any, float]] = {}  # host -> (last heartbeat seen, when)

    def dead(self, hosts: list[dict[str, Any]]) -> set[str]:
        """Update from ``store.hosts()``; the hosts presumed dead now."""
        now = self._clock()
        seen = {}
        for host in hosts:
            mark = (host["heartbeat_at"], (host["info"] or {}).get("beat"))
            previous = self._seen.get(host["host"])
            seen[host["host"]] = previous if previous and previous[0] == mark else (mark, now)
        self._seen = seen
        every = {host["host"]: float((host["info"] or {}).get("every") or 0) for host in hosts}
        return {
            name
            for name, (_, since) in seen.items()
            if now - since >= max(self.stale_after, 3 * every.get(name, 0.0))
        }


class TriggerHost:
    """The ``TriggerContext`` one trigger type gets: its agents, the clock, emit, ticks.

    ``agents`` is read from the engine's project on each access, so after a live reload it is
    the new set."""

    def __init__(self, engine: Engine, trigger: TriggerType):
        self._engine = engine
        self._trigger = trigger
        self._prefix = f"{trigger.name}:"

    @property
    def agents(self) -> list[Any]:
        """Its agents, but those with ``scale = 0``: they never fire."""
        agents = self._engine.project.agents.values()
        return [agent for agent in agents_using(self._trigger, agents) if not agent.disabled]

    def configs(self) -> dict[str, dict[str, Any]]:
        """Its agents' values of the keys its trigger type adds: what a reload compares."""
        keys = set(fragment(self._trigger)[0])
        return {a.name: {k: a.config.get(k) for k in keys} for a in self.agents}

    def clock(self) -> float:
        return self._engine.clock()

    def sleep(self, wake: threading.Event, until: float | None) -> bool:
        return sleep(wake, until)

    def emit(self, event: TriggerEvent, *, coalesce: bool = False) -> EmitResult:
        return self._engine.emit(event, coalesce=coalesce)

    def emit_once(
        self, key: str, tick: float, event: TriggerEvent, *, coalesce: bool = False
    ) -> EmitResult | None:
        return self._engine.emit_once(self._prefix + key, tick, event, coalesce=coalesce)

    def last_tick(self, key: str) -> float | None:
        return self._engine.store.last_tick(self._prefix + key)


class _Stopped(Exception):
    """A stop was asked for while the agents loaded."""


class Scheduler(Engine):
    def __init__(self, project: Any, *, grace: float = 30.0, gateway: dict[str, Any] | None = None):
        stale_after = host_stale_after()
        # ``al start --port/--bind``: over [gateway] of this config and of each reloaded one.
        self.gateway_overrides = {k: v for k, v in (gateway or {}).items() if v is not None}
        apply_overrides(project, self.gateway_overrides)
        self.lock = SchedulerLock(project.state_dir)
        try:
            super().__init__(project)
            self.made_private = self.lock.made_private
            # A database it cannot write stops it here, in one line, before it starts anything
            # (an orderly stop may leave the WAL file, with which SQLite opens read-only).
            self.store.check_writable()
        except BaseException:
            self.lock.release()
            raise
        self.grace = grace
        self.started_at = time.time()
        # It listens first, then loads its agents (``load``): how far that got.
        self.loading = Loading()
        # Which config files it runs with (``al stat`` compares with the files on disk), and
        # why the files on disk are not what it runs (a live reload refused them). Known once
        # it loaded them.
        self.config_digest: str | None = None
        self.config_errors: list[str] = []
        self.kept: set[str] = set()  # agents whose last good version runs (their files refused)
        self.refused_all = False  # the whole change on disk was refused
        self.reloaded_at: float | None = None
        self._seen_digest: str | None = None  # the files the last reload judged
        # What else a config's validity depends on (``reload.Inputs``): a refused config (or
        # an agent held for its config) is judged again when any of it changes.
        self.inputs: Inputs | None = None
        self.held: set[str] = set()  # agents held at start for their config
        # Problems of this process (a trigger that failed to start, a plugin that did not load
        # or was installed after the start): in `al stat`, `al doctor` and the dashboard.
        self.problems: list[str] = []
        self.plugins = installed_plugins()
        self._reloading = threading.Lock()
        self.triggers: list[tuple[Any, TriggerHost]] = []
        self.watcher: ConfigWatcher | None = None
        self.watch = HostWatch(stale_after)
        self._beats = 0
        self._last_housekeeping = 0.0
        self._every = self.housekeeping_every()
        self._last_prune = 0.0

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> int:
        from llamaherd.store import StoreError

        self._install_signals()
        gateway = self.project.gateway
        self.serve(gateway["bind"], int(gateway["port"]))
        # Listening: /health answers and webhook deliveries are taken (stored, routed once
        # their agents are ready) while the agents load; clients find it by this file, which
        # says so (``loading``) until ``load`` is done.
        self._write_info()
        log.info("scheduler %s up on %s: loading its agents", self.host, self.gateway_url)
        try:
            try:
                self.load()
            except _Stopped:
                return 0
            finally:
                self.loading.end()  # requests waiting for the agents go on (or are refused)
            log.info(
                "scheduler %s listening on %s: %d agent(s) ready",
                self.host, self.gateway_url, len(self.project.agents),
            )  # fmt: skip
            self._log_webhook_urls()
            while not self.stopping.is_set():
                self.wakeup.clear()
                self.timers.expire(self.clock())  # this pass arms again what still stands
                try:
                    self.dispatch()
                    self.housekeeping()
                except StoreError as exc:  # a database blip must not stop every host at once
                    log.error("%s; retrying in %gs", exc, STORE_RETRY_AFTER)
                    self.stopping.wait(STORE_RETRY_AFTER)
                    continue
                # Asleep until work may be claimable (an enqueue, a run's end, a state change
                # sets ``wakeup``), the earliest timer, or the next housekeeping: nothing polls.
                sleep(self.wakeup, self.timers.next(), self._until_housekeeping())
        finally:
            self.shutdown()
        return 0

    def load(self) -> None:
        """Read, validate and register the agents, then start what runs them (recovery,
        trigger types, live reload); ``loading`` tells how far it got. Raises ``_Stopped``
        when asked to stop meanwhile, and a project error as ``check_config``."""
        self.read_agents()
        threading.Thread(target=self.prepare_agents, name="prepare", daemon=True).start()
        self._step("starting triggers")(0, len(self.project.agents))
        self.heartbeat()
        self.recover()
        self._start_triggers()
        self.watcher = ConfigWatcher(self.project.root, self.reload, self.stopping).start()
        self.loading.finish()
        self._write_info()  # ready: no longer ``loading``

    def read_agents(self) -> None:
        """Read and validate the agents, what a live reload compares with from then on."""
        root = self.project.root
        # What it loads is judged before it is read: an edit made while it loads is a change.
        self.inputs = Inputs(root)
        self.config_digest = self._seen_digest = config_digest(root)
        self.project.load_agents(self._step("loading"))
        self.check_config()

    def _step(self, phase: str) -> Callable[[int, int], None]:
        """A progress callback for ``phase``: records how far it got; stops the start when
        a stop was asked for."""

        def step(done: int, total: int) -> None:
            self.loading.progress(phase, done, total)
            if self.stopping.is_set():
                self.loading.progress("stopping", done, total)
                raise _Stopped

        return step

    def check_config(self) -> None:
        """Refuse to start on project errors; hold agents whose own config is broken."""
        from llamaherd.schema import validate_project

        problems = validate_project(self.project, self.registry, progress=self._step("validating"))
        for problem in problems:
            (log.error if problem.is_error else log.warning)("%s", problem)
        if any(p.is_error and p.agent is None for p in problems):
            raise LlamaherdError(
                "the project config has errors (listed above); fix them, then `al validate`"
            )
        broken = {p.agent: p for p in problems if p.is_error and p.agent in self.project.agents}
        for name, problem in broken.items():
            if self.store.agent_state(name) != "error":
                self.store.set_agent_state(name, "error", f"{INVALID_CONFIG} {problem}")
        self.held = set(broken)
        for name, error in get_manager().failed.items():
            self._problem(f"plugin {name} failed to load: {error}")

    def _log_webhook_urls(self) -> None:
        """Where each webhook source receives, under ``[gateway] url`` when set (the address
        senders use)."""
        base = self.project.public_url or self.gateway_url
        sources = self.project.config.get("webhooks")
        for name, table in sorted(sources.items() if isinstance(sources, dict) else []):
            kind = table.get("type", "generic") if isinstance(table, dict) else "?"
            log.info("webhook source %s (%s): %s/webhooks/%s", name, kind, base, name)

    def prepare_agents(self, names: list[str] | None = None) -> None:
        """Let each agent's (or each named agent's) runtime get ready ahead of its first run
        (the docker runtime builds missing images, its progress in the log). A failure is
        logged; a run of the agent then fails with it and holds the agent, as without this
        head start."""
        agents = self.project.agents
        for agent in [agents[n] for n in names if n in agents] if names else agents.values():
            runtime = self.registry.runtimes.get(agent.runtime["type"])
            if agent.disabled:
                log.info("agent %s: disabled (scale = 0): it never runs", agent.name)
                continue
            if runtime is None or self.store.agent_state(agent.name) == "error":
                continue
            try:
                prepared = runtime.prepare(agent, self.project)
            except Exception as exc:  # a plugin's failure must not stop the scheduler
                log.error("agent %s: %s", agent.name, exc)
                continue
            log.info("agent %s: ready%s", agent.name, f" ({prepared})" if prepared else "")

    def request_stop(self, signum: int | None = None, *_: Any) -> None:
        if signum is not None:
            log.info("received %s: stopping", signal.Signals(signum).name)
        self.stopping.set()
        self.wakeup.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.request_stop)
            signal.signal(signal.SIGINT, self.request_stop)

    def _write_info(self) -> None:
        info = {
            "pid": os.getpid(),
            "host": self.host,
            "url": self.gateway_url,
            "socket": self.gateway_socket,
            **self.identity(),
        }
        path = self.project.state_dir / "scheduler.json"
        tmp = path.with_suffix(".tmp")
        with open_private(tmp, "wb") as fh:
            fh.write(json.dumps(info).encode())
        os.replace(tmp, path)

    def identity(self) -> dict[str, Any]:
        """Since when it runs, its version, the config it loaded, why it refused the one on
        disk, what failed in it and the plugins it loaded: in ``scheduler.json`` and its
        heartbeat, for ``al stat``, ``al run``, ``al validate`` and the control API."""
        return {
            "started_at": self.started_at,
            "loading": self.loading.as_dict(),
            "version": __version__,
            "config_digest": self.config_digest,
            "config_errors": list(self.config_errors),
            "kept": sorted(self.kept),
            "refused_all": self.refused_all,
            "reloaded_at": self.reloaded_at,
            "problems": list(self.problems),
            "plugins": sorted(self.plugins),
        }

    def _problem(self, message: str) -> None:
        """Log ``message`` as an error and keep it for ``al stat`` (once)."""
        log.error("%s", message)
        if message not in self.problems:
            self.problems.append(message)

    def _start_triggers(self) -> None:
        for trigger in self.registry.trigger_types.values():
            host = TriggerHost(self, trigger)
            try:
                trigger.start(host)
            except Exception as exc:
                self._problem(f"trigger type {trigger.name} failed to start: {exc}")
                continue
            self.triggers.append((trigger, host))

    # ------------------------------------------------------------------ live reload
    @property
    def disk_digest(self) -> str:
        """The digest of the config files on disk as the watcher last read them (it looks on
        every change, and every few seconds): what ``al stat`` compares with the loaded one,
        so a request never reads a project file itself."""
        return self._seen_digest

    def reload(self) -> None:
        """Apply the config files on disk when they changed since the last look (the
        ``ConfigWatcher`` calls this): what is valid runs from the next trigger on, what is
        not is refused (logged, and in ``al stat``) and its last good version keeps running.
        A reload that fails outright is a refusal too: said in ``al stat``, not only logged
        (``al stat`` said "config current" while every look failed)."""
        with self._reloading:
            if self.stopping.is_set() or self.inputs is None:  # still loading: it reads them
                return
            try:
                self._reload()
            except Exception as exc:
                failure = f"live reload failed: {type(exc).__name__}: {exc}"
                if [failure] != self.config_errors:
                    log.exception("%s", failure)
                self.config_errors, self.refused_all = [failure], True
                self._write_info()

    def _reload(self) -> None:
        changed_inputs = self.inputs.changed()
        if "plugins" in changed_inputs:
            self._check_plugins()
        digest = config_digest(self.project.root)
        # Files refused (or agents held) are judged again when what they lacked may have
        # appeared: a credential, a plugin, or a `touch` of a file.
        waiting = bool(self.config_errors or self.held)
        if digest == self._seen_digest and not (waiting and changed_inputs):
            return
        self._seen_digest = digest
        found = candidate(self.project, self.registry, self.gateway_overrides)
        restart = self._restart_hint()
        refused = [problem + restart for problem in found.refused]
        if refused != self.config_errors:  # a re-check that found the same says nothing new
            for problem in refused:
                log.error("config change refused: %s", problem)
        if found.project is None:
            if refused != self.config_errors:
                log.error("the running config stays as it was (fix the above, then save)")
        else:
            self._apply(found.project, found.kept)
            self.kept = set(found.kept)
        self.config_errors = refused
        self.refused_all = found.project is None
        if not found.refused:
            self.config_digest = digest
        self._write_info()

    def _check_plugins(self) -> None:
        """Plugins installed or removed since the start need a restart: said in the log, in
        ``al stat`` and in the refusal of a config that uses them."""
        now = installed_plugins()
        before = [p for p in self.problems if p.startswith(PLUGINS_CHANGED)]
        found = [
            f"{PLUGINS_CHANGED} {verb} after start ({', '.join(sorted(names))}): "
            "restart the scheduler (`al stop && al start`)"
            for verb, names in (("installed", now - self.plugins), ("removed", self.plugins - now))
            if names
        ]
        if found == before:
            return
        self.problems = [p for p in self.problems if p not in before]
        for problem in found:
            self._problem(problem)
        self._write_info()

    def _restart_hint(self) -> str:
        """What a refusal adds when plugins changed since the start (an `unknown key` may be
        a new plugin's)."""
        changed = [p for p in self.problems if p.startswith(PLUGINS_CHANGED)]
        return f" ({'; '.join(changed)})" if changed else ""

    def _apply(self, project: Any, kept: set[str]) -> None:
        old = self.project
        added, removed, changed = changed_agents(old, project)
        for setting in keep_restart_settings(old, project):
            log.warning("config.toml: %s changed: it applies at the next `al start`", setting)
        before = [host.configs() for _, host in self.triggers]
        self.project = project
        self.reloaded_at = time.time()
        for (trigger, host), configs in zip(self.triggers, before, strict=True):
            if host.configs() != configs:
                self._reconfigure(trigger, host)
        self._release_fixed([name for name in project.agents if name not in kept])
        log.info(
            "config reloaded: %s",
            "; ".join(
                f"{what} {', '.join(names)}"
                for what, names in (
                    ("added", added),
                    ("removed (queue kept)", removed),
                    ("changed", changed),
                    ("kept at the last good version", sorted(kept)),
                )
                if names
            )
            or "agents unchanged",
        )
        if added or changed:
            threading.Thread(
                target=self.prepare_agents, args=(added + changed,), name="prepare", daemon=True
            ).start()
        self.wakeup.set()  # a new agent's queued items may be claimable now

    def _reconfigure(self, trigger: Any, host: TriggerHost) -> None:
        """Give a trigger type its new agents: ``reconfigure(ctx)`` when it has it, else
        ``stop()`` and ``start(ctx)`` again."""
        try:
            reconfigure = getattr(trigger, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(host)
            else:
                trigger.stop()
                trigger.start(host)
        except Exception as exc:  # a plugin's failure must not stop the scheduler
            log.error("trigger type %s failed to take the new config: %s", trigger.name, exc)

    def _release_fixed(self, valid: list[str]) -> None:
        """Agents held at start for an invalid config that is now ``valid`` go back to idle."""
        for name in valid:
            self.held.discard(name)
            if self.store.agent_state(name) != "error":
                continue
            events = self.store.agent_events(name, limit=20)
            cause = next((e["data"] for e in reversed(events) if e["type"] == "state"), None) or {}
            if str(cause.get("cause", "")).startswith(INVALID_CONFIG):
                self.store.set_agent_state(name, "idle", "config fixed (live reload)")

    def shutdown(self) -> None:
        """Stop triggers, let active runs finish within the grace period, then interrupt the rest
        (requeued with a recovery notice, as after a crash)."""
        if self.watcher is not None:
            self.watcher.close()
        for trigger, _ in self.triggers:
            try:
                trigger.stop()
            except Exception as exc:
                log.warning("trigger type %s failed to stop: %s", trigger.name, exc)
        deadline = time.monotonic() + self.grace
        for thread in list(self.threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        for run_id, thread in list(self.threads.items()):
            if thread.is_alive():
                self._cut_off(run_id)
                thread.join(5)
        with self._reloading:  # a reload under way would write scheduler.json again
            try:
                (self.project.state_dir / "scheduler.json").unlink()
            except FileNotFoundError:
                pass
        self._leave()
        self.close()
        self.lock.release()
        log.info("scheduler %s stopped", self.host)

    def _leave(self) -> None:
        """Drop our heartbeat row on a clean stop: the other hosts need not wait for it to go
        stale."""
        from llamaherd.store import StoreError

        try:
            self.store.forget_host(self.host)
        except StoreError as exc:
            log.warning("could not remove this host's heartbeat row: %s", exc)

    # ------------------------------------------------------------------ upkeep
    def heartbeat(self) -> None:
        """Tell the other hosts we are alive; ``beat`` changes even when a fake clock stands,
        ``every`` says how often it does (``HostWatch`` waits at least three of them)."""
        self._beats += 1
        info = {
            "pid": os.getpid(), "url": self.gateway_url, "beat": self._beats,
            "every": self._every, **self.identity(),
        }  # fmt: skip
        self.store.heartbeat_host(self.host, info)

    def _between_passes(self) -> None:
        """What every wake-up does, not only the full pass: expire due waits (and arm the
        next wait deadline), hand flow control's interrupts to runs that started here since,
        prune when an hour of the engine's clock has passed."""
        for run in self.store.expired_waits(self.clock()):
            self.runner.expire_wait(run)
        self.timers.arm("waits", self.store.next_wait_deadline())
        self.deliver_flow_messages()
        self._prune()

    def housekeeping_every(self) -> float:
        """Seconds between housekeeping passes: each second where other hosts may share the
        database (their heartbeats watched, their items claimed, their changes to what is
        due seen), else a minute."""
        return HOUSEKEEPING_EVERY if self.store.shared else IDLE_HOUSEKEEPING_EVERY

    def _until_housekeeping(self) -> float:
        """Real seconds until the next housekeeping pass (or the next look at a hold that said
        no end, ``Engine.recheck_holds``)."""
        until = self._last_housekeeping + self._every - time.monotonic()
        return max(0.0, min(until, HOLD_RECHECK) if self.recheck_holds else until)

    def housekeeping(self) -> None:
        now = time.monotonic()
        if self._last_housekeeping and now - self._last_housekeeping < self._every:
            self._between_passes()
            return
        self._last_housekeeping = now
        self.heartbeat()
        self._between_passes()
        dead = self._dead_hosts()
        running = self.store.runs(states=("running",), limit=10_000)
        self.reconcile(running, startup=False, dead=dead)
        self._forget(dead)
        self._stop_lost_runs({run.id for run in running})

    def _prune(self) -> None:
        """Every hour of the engine's clock (a fake one in tests), delete what is older than
        ``historyRetentionDays``: finished runs and their events, old agent events and
        ticks, plugins' rows (the webhooks' deliveries and dead letters)."""
        now = self.clock()
        if now - self._last_prune < PRUNE_EVERY:
            return
        self._last_prune = now
        self.timers.arm("prune", now + PRUNE_EVERY)
        days = float(self.project.setting("historyRetentionDays"))
        removed = self.store.prune(days)
        if removed:
            log.info("pruned %d row(s) older than %g days (historyRetentionDays)", removed, days)

    def recover(self) -> None:
        """Reconcile runs a crash left behind, then remove sandboxes no live run owns."""
        dead = self._dead_hosts()
        self.reconcile(self.store.runs(states=("running",), limit=10_000), startup=True, dead=dead)
        self._forget(dead)
        live = {r.id for r in self.store.runs(states=("running", "waiting"), limit=100_000)}
        for runtime in self.registry.runtimes.values():
            try:
                removed = runtime.cleanup_orphans(live, self.project)
            except Exception as exc:
                log.warning("runtime %s: orphan cleanup failed: %s", runtime.name, exc)
                continue
            if removed:
                log.info("runtime %s: removed %d orphaned sandboxes", runtime.name, removed)

    def reconcile(self, runs: list[Any], *, startup: bool, dead: set[str]) -> None:
        """Adopt (at startup, when its sandbox lives here) or interrupt each run whose owner
        died: a process of this machine that is gone, a host in ``dead``, or (at startup) an
        earlier process with our own host id (a container's pid is often the same)."""
        for run in runs:
            if run.id in self.threads:
                continue
            # Ours, but its thread ended without recording an end (the store failed then).
            orphan = not startup and run.host == self.host
            if not orphan and not self._owner_dead(run.host, dead, startup):
                continue
            if startup and self._local(run.host) and self.runner.attach(run):
                log.info("adopted run %s", run.id)
                self._record_adoption(run)
            elif not orphan and not run.sandbox and not run.transcript:
                # Claimed, then its scheduler died before its sandbox was recorded: no command
                # of it ran, so it starts now as itself rather than end error/interrupted
                # beside a recovery run that does the same work.
                log.info("run %s: starting it here (its scheduler died before it began)", run.id)
            else:
                self.interrupted(run)
                continue
            self.store.update_run(run.id, host=self.host)
            self.start_thread(self.store.get_run(run.id))

    def _record_adoption(self, run: Any) -> None:
        """The outage's facts as the run's ``adopted`` event (before its dead scheduler's
        heartbeat is forgotten): the tool call the crash cut off is answered with them."""
        from llamaherd.recovery import ADOPTED, recovery_facts

        events = self.store.events(run.id)
        facts = recovery_facts(self.store, run, events, self.clock(), down_until_now=True)
        self.store.add_event(run.id, ADOPTED, facts)

    def _dead_hosts(self) -> set[str]:
        """Hosts presumed dead: a stale heartbeat, or a process of this machine that is gone."""
        rows = self.store.hosts()
        stale = self.watch.dead(rows)
        return {row["host"] for row in rows if self._owner_dead(row["host"], stale, False)}

    def _forget(self, dead: set[str]) -> None:
        """Drop dead hosts' rows once their runs are reconciled (one that was only slow
        heartbeats anew and is watched afresh)."""
        for host in dead:
            self.store.forget_host(host)

    def _owner_dead(self, host: str | None, dead: set[str], startup: bool) -> bool:
        if host == self.host:
            return startup
        if not host or host in dead:
            return True
        name, _, pid = host.rpartition(":")
        return name == machine_name() and pid.isdigit() and not pid_alive(int(pid))

    @staticmethod
    def _local(host: str | None) -> bool:
        """Whether ``host`` ran on this machine (only then can its sandboxes be here)."""
        return not host or host.rpartition(":")[0] == machine_name()

    def _stop_lost_runs(self, running: set[str]) -> None:
        """Stop our runs that another host ended in the database: killed there (`al kill` on
        any host), or interrupted while we were presumed dead (a long pause, a network
        partition), when their work item is already queued again."""
        for run_id in set(self.threads) - running:
            run = self.store.get_run(run_id)
            if run is None or not (run.state == "killed" or run.reason == "interrupted"):
                continue
            if self.runner.kill(run_id, reason=run.reason or run.state):
                log.warning(
                    "run %s was ended by another host (%s): stopped here", run_id, run.reason
                )

    def interrupted(self, run: Any) -> None:
        """Mark a run whose process died as error/interrupted and requeue its trigger once."""
        from llamaherd.store import InvalidTransition

        events = self.store.events(run.id)  # read before the interruption itself is recorded
        try:
            self.store.transition(run.id, "error", reason="interrupted")
        except InvalidTransition:
            return  # another scheduler got there first
        log.warning("run %s was interrupted (its scheduler died)", run.id)
        self._cleanup_sandbox(run)
        self.requeue_interrupted(run, events, down_until_now=True)

    def _cut_off(self, run_id: str) -> None:
        """A run still active when the stop's grace period ends is interrupted as by a crash:
        ended error/interrupted here and now, and its trigger requeued with the recovery notice
        (not lost, as a plain kill would)."""
        run = self.store.get_run(run_id)
        events = self.store.events(run_id)
        if run is not None and self.runner.kill(run_id, reason="interrupted", state="error"):
            log.warning("run %s was still active when the grace period ended: requeued", run_id)
            self.requeue_interrupted(run, events)

    def _cleanup_sandbox(self, run: Any) -> None:
        agent = self.project.agents.get(run.agent)
        runtime = self.registry.runtimes.get(agent.runtime["type"]) if agent else None
        if runtime is None or not run.sandbox:
            return
        try:
            sandbox = runtime.attach(run.sandbox, None)
            if sandbox is not None:
                sandbox.kill()
                sandbox.cleanup()
        except Exception as exc:
            log.warning("run %s: sandbox cleanup failed: %s", run.id, exc)

"""The Engine: what a scheduler and a foreground ``al run`` share.

It holds the project, the store, the plugin registry, the credential store, the HTTP server
(gateway API, control API and plugin routes) and the runner. Triggers call ``emit``; the
scheduler adds trigger plugins, a dispatcher and crash recovery on top (``llamaherd.scheduler``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
from functools import cached_property
from pathlib import Path
from typing import Any

from llamaherd.clock import clock, host_id
from llamaherd.errors import ConfigError
from llamaherd.flow import policy_of
from llamaherd.loading import Loading, LoadingGate
from llamaherd.processes import pid_alive
from llamaherd.timers import Timers
from llamaherd.triggers import trigger_kind
from llamaherd.types import EmitResult, Hold, TriggerEvent

log = logging.getLogger("llamaherd.engine")

# Agent states that hold triggers instead of running them (issue: agent lifecycle states).
HELD_STATES = ("off", "error", "suspended")
# Runs started by one claim transaction at most when that many slots are free: bounds how long
# the first of them waits for its thread.
CLAIM_BATCH = 32
# Real seconds after which an admission check that said no end to its hold is asked again,
# while queued work waits (a maintenance window lifted by hand is seen this soon).
HOLD_RECHECK = 5.0


def _period_budget(agent: Any) -> bool:
    """Whether a daily or monthly budget (the agent's or the project's) applies to ``agent``."""
    try:
        return bool(agent.budgets.scoped())
    except ConfigError:  # a broken [budget]: `al validate` says why
        return False


def socket_prefix(root: Path) -> Path:
    """``/tmp/al-gw-<project digest>-``: a scheduler's socket directory adds its pid and a
    random part (``<pid>-<random>``)."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"al-gw-{digest}-"


_swept: set[Path] = set()  # socket prefixes this process has swept


def remove_stale_socket_dirs(prefix: Path) -> list[Path]:
    """Remove this project's gateway socket directories (``<prefix><pid>-<random>``, or
    ``<prefix><pid>`` of older versions) left behind by schedulers that died (``kill -9``, a
    failed start); only ours: our uid, a dead pid. Once per process and project: it lists
    all of /tmp, and `al test` starts an engine per case."""
    if prefix in _swept:
        return []
    _swept.add(prefix)
    removed = []
    for directory in prefix.parent.glob(prefix.name + "*"):
        pid = directory.name.removeprefix(prefix.name).split("-", 1)[0]
        try:
            info = directory.lstat()
        except FileNotFoundError:
            continue
        if not pid.isdigit() or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue
        if int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


class Engine:
    """Project, store, registry, credentials, runner and HTTP server of one process."""

    clock = staticmethod(clock)
    # A fenced engine's runs are nobody else's business: plugins' run lifecycle hooks
    # (run_started, run_event, run_finished) never hear of them (a test engine,
    # ``llamaherd.agent_tests.fence``).
    fenced = False
    # The modules whose ``register_routes`` the HTTP server serves; None: every plugin's.
    route_plugins: tuple[str, ...] | None = None

    def __init__(self, project: Any, *, host: str | None = None):
        from llamaherd.credentials import CredentialStore
        from llamaherd.plugins import registry
        from llamaherd.store import Store

        self.project = project
        # An engine's project is loaded by its maker; a scheduler listens first and loads its
        # agents after (``llamaherd.loading``).
        self.loading = Loading(ready=True)
        self.registry = registry()
        self.store = Store.open(
            project.database_url, str(project.root), tables=self.registry.table_sets.values()
        )
        self.credentials = CredentialStore()
        self.host = host or host_id()
        self.wakeup = threading.Event()  # set when work may be claimable
        # When work becomes claimable by the clock alone (``llamaherd.timers``): the dispatch
        # and housekeeping passes arm them, a scheduler's main loop sleeps until the earliest.
        self.timers = Timers()
        # An admission check held queued work without saying until when: look again within
        # HOLD_RECHECK real seconds (what it waits for is outside, not a moment of the clock).
        self.recheck_holds = False
        # Agents whose runtime had no room (SandboxBusy): claim none of theirs until then
        # (epoch seconds of the engine's clock).
        self._deferred: dict[str, float] = {}
        self.gateway_url = ""
        self.gateway_socket: str | None = None
        # Files of .al/ the scheduler's start found open to other users and made private
        # (``statedir.secure``): a secret among them may have been copied.
        self.made_private: list[Path] = []
        self._servers: list[Any] = []
        self.threads: dict[str, threading.Thread] = {}
        self.stopping = threading.Event()
        self._queued_here = False  # this process queued work (``close`` tells a scheduler)
        # Item id -> run id of the latest claims here, for ``started`` (the newest 1,000).
        self._started: dict[int, str] = {}
        self._claims = threading.Condition()

    @cached_property
    def runner(self) -> Any:
        from llamaherd.runner import Runner

        return Runner(self)

    def run_hook(self, name: str, **kwargs: Any) -> None:
        """Call the plugins' run lifecycle hook ``name`` (``run_started``, ``run_finished``);
        one failing plugin never skips the rest. Not for a fenced engine's runs."""
        if not self.fenced:
            from llamaherd.plugins import get_manager

            get_manager().call_each(name, **kwargs)

    # ------------------------------------------------------------------ HTTP
    def serve(self, bind: str = "127.0.0.1", port: int = 0) -> None:
        """Start the HTTP server on ``bind:port`` and on a private unix socket."""
        from llamaherd.http_guard import BodyBudget, Limits
        from llamaherd.server import ServerThread, build_app

        app = build_app(self)
        if not self.loading.ready:  # what needs the agents waits for them
            app.add_middleware(LoadingGate, loading=self.loading)
        # One budget of request-body bytes for the process: both servers take from it.
        budget = app.state.body_budget = BodyBudget.of(self.project.gateway)
        limits = Limits.of(self.project.gateway, budget)
        tcp = ServerThread(app, host=bind, port=port, limits=limits).start()
        self._servers.append(tcp)
        local = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        self.gateway_url = f"http://{local}:{tcp.port}"
        self.gateway_socket = self._socket_path()
        # The socket has its own cap: sandboxes reach the gateway there, so a flood of TCP
        # connections never evicts them.
        self._servers.append(
            ServerThread(
                app, uds=self.gateway_socket, limits=Limits.of(self.project.gateway, budget)
            ).start()
        )
        self.app = app

    def _socket_path(self) -> str:
        # Unix socket paths are limited to ~107 bytes, so they live under /tmp, named per
        # project and process: al-gw-<project digest>-<pid>-<random>. /tmp is shared and a
        # pid is predictable (another user once created every pid's name in advance, and the
        # scheduler could not start): mkdtemp picks a name nobody can guess and creates it
        # ours, or tries another.
        prefix = socket_prefix(self.project.root)
        remove_stale_socket_dirs(prefix)
        directory = tempfile.mkdtemp(prefix=f"{prefix.name}{os.getpid()}-", dir=prefix.parent)
        os.chmod(directory, 0o755)  # sandbox users connect to the socket in it
        return os.path.join(directory, "gateway.sock")

    def close(self) -> None:
        if self._queued_here:
            self._wake_scheduler()
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()
        if self.gateway_socket:
            try:
                os.unlink(self.gateway_socket)
                os.rmdir(os.path.dirname(self.gateway_socket))
            except OSError:
                pass
        self.store.close()

    # ------------------------------------------------------------------ triggers
    def emit(
        self, event: TriggerEvent, *, coalesce: bool = False, waiting: list[Any] | None = None
    ) -> EmitResult:
        """Queue ``event`` for its agent (durably, before returning) and offer it to waiting runs.

        An event that resumes a waiting run of its own agent is consumed by it. An event with
        ``agent == ""`` is only offered to waiting runs (a webhook no agent is configured for).
        Agent states gate here (``gate``). ``coalesce``: not queued while an item of the same
        agent and kind is still queued. ``waiting``: the waiting runs as ``emit_all`` read them.
        """
        result = self._emit(event, coalesce, None, waiting)
        assert result is not None  # only a claimed tick answers None
        return result

    def emit_all(self, events: list[TriggerEvent]) -> list[EmitResult]:
        """``emit`` each of several events of one occurrence (a webhook delivery to its agents,
        then to every waiting run), inside the caller's write transaction: the waiting runs'
        filters are read once for all of them, not once each."""
        waiting = self.store.wait_filters()
        return [self.emit(event, waiting=waiting) for event in events]

    def emit_once(
        self, key: str, tick: float, event: TriggerEvent, *, coalesce: bool = False
    ) -> EmitResult | None:
        """``emit``, claiming ``(key, tick)`` in the same transaction as the queued item (a
        refused event claims it too); None when it was claimed before."""
        return self._emit(event, coalesce, (key, tick))

    def _emit(
        self,
        event: TriggerEvent,
        coalesce: bool,
        once: tuple[str, float] | None,
        waiting: list[Any] | None = None,
    ) -> EmitResult | None:
        resumed = self._offer_to_waits(event, waiting)
        result = EmitResult(resumed=resumed)
        if not event.agent:
            return result
        agent = self.project.agents.get(event.agent)
        if agent is None:
            result.refused = f"no such agent {event.agent!r}"
            return result
        if resumed:  # match_waiting offers an agent's event only to that agent's waiting runs
            return result
        result.refused = self.gate(event.agent, event.kind)
        policy = None if result.refused else policy_of(agent)
        ticket = None if policy is None else self._ticket(policy, event)
        if not self.store.write(
            self._queue, event, agent.queue_size, coalesce, once, result, ticket
        ):
            return None
        if ticket is not None and ticket.outcome is not None:
            self._flow_done(event, ticket, result)
        # After the commit, not before: inside a caller's transaction (a webhook's fan-out) the
        # dispatcher would look before the item is visible and sleep until its next pass. Not
        # for a paused agent: nothing of it is claimed until `al resume`, which wakes it.
        if not self.store.paused_as_seen(event.agent):
            self.store.after_commit(self.wakeup.set)
        self._queued_here = self._queued_here or result.queued is not None
        return result

    def _wake_scheduler(self) -> None:
        """Tell the project's running scheduler, when it is another process, that work was
        queued behind its back: it sleeps until woken (or its once-a-minute pass)."""
        from llamaherd.client import ControlClient

        try:
            client = ControlClient.of_state_dir(self.project.state_dir)
            if client is not None and client.pid != os.getpid():
                client.post("/control/wake")
        except Exception as exc:  # it picks the work up at its next pass all the same
            log.info("could not wake the running scheduler: %s", exc)

    def _ticket(self, policy: Any, event: TriggerEvent) -> Any:
        """The trigger's keys and priority under the agent's ``[flow]`` (and, for a singleton
        ``interrupt``, the message its key's active run would be told)."""
        from llamaherd.flow import interrupt_message, ticket

        found = ticket(policy, event)
        if policy.singleton == "interrupt" and found.admit:
            found.message = interrupt_message(self.registry, event, found)
        return found

    def _flow_done(self, event: TriggerEvent, ticket: Any, result: EmitResult) -> None:
        """Once the trigger is written: stop the sandboxes of the runs a ``cancel`` superseded
        that run here (their end is in the same transaction; another host stops its own as it
        sees them killed), hand an ``interrupt`` to its run if it is here, say what happened."""
        result.flow = ticket.outcome + (f": {ticket.reason}" if ticket.reason else "")
        for run_id in ticket.superseded:
            # Off the caller's thread: an emit may be inside a write transaction (a webhook's
            # fan-out), which a sandbox's kill must not hold up.
            threading.Thread(
                target=self.runner.kill, args=(run_id, "superseded"), daemon=True
            ).start()
        if ticket.interrupted is not None and ticket.interrupted[1] == self.host:
            self.deliver_flow_messages()
        quiet = ticket.outcome in ("debounced", "dropped", "skipped")  # recorded as events
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "agent %s: %s %s", event.agent, ticket.label, result.flow,
        )  # fmt: skip

    def deliver_flow_messages(self) -> None:
        """Hand the interrupt messages for runs of this host to them (the housekeeping pass
        delivers those another host's ingest stored). A run not yet started here keeps its
        message for the next pass; one that parked for a trigger meanwhile is woken with it;
        one that ended (or waits for a human) drops it: its stored trigger is the newest."""
        for message_id, run_id, text in self.store.flow_messages(self.host):
            if not self.runner.interrupt(run_id, text):
                run = self.store.get_run(run_id)
                if run is not None and run.state == "running":
                    continue  # claimed, its thread not started yet: the next pass
                wait = (run.wait_filter or {}).get("type") if run is not None else None
                if (
                    run is not None
                    and run.state == "waiting"
                    and wait not in ("human", "suspension")
                ):
                    self.store.resume_waiting(
                        run_id, {"result": "a newer trigger arrived", "is_error": True,
                                 "message": text},
                    )  # fmt: skip
            self.store.drop_flow_message(message_id)

    def _queue(
        self,
        event: TriggerEvent,
        limit: int,
        coalesce: bool,
        once: tuple[str, float] | None,
        result: EmitResult,
        ticket: Any = None,
    ) -> bool:
        """In one write transaction (shared with concurrent emits): claim the tick, queue the
        item unless refused. False when the tick was claimed before."""
        if once is not None and not self.store.claim_tick(*once):
            return False
        if not result.refused:
            result.queued = self.store.enqueue(
                event.agent,
                event.kind,
                event.payload,
                event.prompt,
                limit=limit,
                source=event.source,
                dedupe_key=event.dedupe_key,
                coalesce=coalesce,
                call_id=event.call_id,
                rerun_count=event.rerun_count,
                recovery=event.recovery,
                flow=ticket,
            )
        return True

    def requeue_interrupted(
        self,
        run: Any,
        events: list[dict[str, Any]] | None = None,
        down_until_now: bool = False,
        cause: str | None = None,
    ) -> None:
        """Queue an interrupted run's trigger again, once, with what the recovery notice says
        (``onInterrupted = "fail"`` and a run that was itself a recovery: not requeued): its
        scheduler died, or its sandbox went away with its host (``SandboxLost``, ``cause``).
        ``down_until_now``: the system is back now (a crash found at startup); else (a stop,
        a lost host) the notice counts the downtime until the new run starts."""
        agent = self.project.agents.get(run.agent)
        trigger = run.trigger or {}
        if (
            agent is None
            or agent.get("onInterrupted", "requeue") == "fail"
            or trigger.get("recovery")
        ):
            return
        from llamaherd.recovery import recovery_facts

        if events is None:
            events = self.store.events(run.id)
        recovery = recovery_facts(
            self.store, run, events, self.clock(), cause=cause, down_until_now=down_until_now
        )
        self.emit(
            TriggerEvent(
                agent=run.agent,
                kind=run.trigger_kind,
                payload=trigger.get("payload", {}),
                prompt=trigger.get("prompt", ""),
                source=trigger.get("source"),
                call_id=run.call_id,
                recovery=recovery,
            )
        )

    def _offer_to_waits(self, event: TriggerEvent, waiting: list[Any] | None = None) -> list[str]:
        from llamaherd.waits import match_waiting

        resumed = match_waiting(self, event, waiting)
        if resumed:
            self.store.after_commit(self.wakeup.set)
        return resumed

    def gate(self, agent: str, kind: str, detail: dict[str, Any] | None = None) -> str | None:
        """Why the agent's state refuses a ``kind`` trigger now (recorded as a
        ``trigger.refused`` agent event with ``detail``), or None when it may queue.

        ``off`` refuses everything; ``hibernate`` refuses every kind whose trigger type does not
        run while hibernating (``TriggerType.while_hibernating``); held states (``error``,
        ``suspended``) still queue."""
        state = self.store.agent_state(agent)
        refused = None
        found = self.project.agents.get(agent)
        if found is not None and found.disabled:
            # Not an agent event: its triggers are not started, so this is a manual run, a call
            # or a webhook delivery, each of which says so itself.
            where = found.project.relative(found.config_file)
            return f"agent {agent!r} is disabled (scale = 0 in {where})"
        if state == "off":
            refused = f"agent {agent!r} is off (turn it on with `al state {agent} idle`)"
        elif state == "hibernate" and kind not in self.hibernating_kinds():
            refused = (
                f"agent {agent!r} is hibernating: only its schedule starts runs "
                f"(wake it with `al state {agent} idle`)"
            )
        if refused:
            data = {"kind": kind, "reason": refused, **(detail or {})}
            self.store.add_agent_event(agent, "trigger.refused", data)
            log.info("%s trigger refused: %s", kind, refused)
        return refused

    def hibernating_kinds(self) -> set[str]:
        """Event kinds that still start runs of a hibernating agent (``while_hibernating``)."""
        return {
            trigger_kind(trigger)
            for trigger in self.registry.trigger_types.values()
            if getattr(trigger, "while_hibernating", False)
        }

    # ------------------------------------------------------------------ dispatch
    def _scales(self, suspended: list[tuple[str, str]]) -> dict[str, int]:
        """Claimable capacity per agent: its ``scale`` less its ``suspended`` runs (each holds
        its slot for when it is approved); -1 while it is held or paused. A hold that ends at a
        known moment (a deferral, a budget's period) arms a timer for it."""
        paused_all, paused = self.store.paused()
        states = self.store.agent_states()
        holding: dict[str, int] = {}
        for _, agent in suspended:
            holding[agent] = holding.get(agent, 0) + 1
        scales = {}
        now = self.clock()
        self.recheck_holds = False
        budgeted = {name for name, agent in self.project.agents.items() if _period_budget(agent)}
        running = self.store.active_runs() if budgeted else {}
        for name, agent in self.project.agents.items():
            held = paused_all or name in paused or states.get(name, "idle") in HELD_STATES
            held = held or self._held(name, agent, now)
            scale = max(0, agent.scale - holding.get(name, 0))
            if name in budgeted:
                # One start per claim pass: each is admitted against the reservations of the
                # runs started before it (``llamaherd.budgets.reserved_hold``).
                scale = min(scale, running.get(name, (0, 0))[0] + 1)
            scales[name] = -1 if held else scale
        return scales

    def _held(self, name: str, agent: Any, now: float) -> bool:
        """Whether a deferral (``defer``) or an admission check holds ``agent`` now; either
        arms a timer for when it ends."""
        deferred = self._deferred.get(name)
        if deferred is not None and deferred <= now:
            self._deferred.pop(name, None)
            deferred = None
        self.timers.arm(f"defer:{name}", deferred)
        hold = None if deferred is not None else self.admission(agent)
        self.timers.arm(f"hold:{name}", hold and hold.until)
        self.recheck_holds = self.recheck_holds or (hold is not None and hold.until is None)
        return deferred is not None or hold is not None

    def defer(self, agent: str, seconds: float) -> None:
        """Claim none of ``agent``'s queued items for ``seconds`` (its runtime had no room for
        a run, ``SandboxBusy``), unless a run of it ends here first (room may be free then)."""
        self._deferred[agent] = self.clock() + seconds
        self.wakeup.set()  # the next pass arms the deferral's end

    def admission(self, agent: Any) -> Hold | None:
        """Whether an admission check holds ``agent``'s queued runs now (a budget spent...):
        its ``Hold``, or None (``llamaherd.status.hold_of``)."""
        from llamaherd.status import hold_of

        return hold_of(self.registry, agent, self.store, self.clock())

    def _suspended(self) -> list[tuple[str, str]]:
        """(run id, agent) of the runs suspended at their turn limit, approved or not yet."""
        from llamaherd.agents import SUSPENSION

        return [
            (run_id, agent)
            for run_id, agent, wait in self.store.wait_filters()
            if (wait or {}).get("type") == SUSPENSION
        ]

    def claim(self) -> tuple[Any, Any] | None:
        """The next claim of ``claims``, or None."""
        claimed = self.claims(1)
        return claimed[0] if claimed else None

    def claims(self, limit: int) -> list[tuple[Any, Any]]:
        """An approved suspended run first (it resumes at once, in the slot it held, unless its
        agent is held or paused), else up to ``limit`` queued items in one transaction."""
        if not self.store.has_queued():
            self.timers.arm("flow", None)
            self.recheck_holds = False
            return []  # one index probe: an idle dispatcher reads nothing per agent
        suspended = self._suspended()
        scales = self._scales(suspended)
        for run_id, agent in suspended:
            claimed = scales.get(agent, -1) >= 0 and self.store.claim_resume(run_id, self.host)
            if claimed:
                return [claimed]
        room = {name: max(0, scale) for name, scale in scales.items()}
        flows = {name: p for name, a in self.project.agents.items() if (p := policy_of(a))}
        cap = self.project.setting("scale")
        claimed = self.store.claim_many(room, cap, self.host, flows=flows, limit=limit)
        self.timers.arm("flow", claimed.due)
        return claimed

    def dispatch(self) -> None:
        while not self.stopping.is_set():
            claimed = self.claims(CLAIM_BATCH)
            if not claimed:
                return
            for _item, run in claimed:
                self.start_thread(run)
            self._note_claims(claimed)

    def _note_claims(self, claimed: list[tuple[Any, Any]]) -> None:
        with self._claims:
            for item, run in claimed:
                self._started[item.id] = run.id
                for member in (run.trigger.get("flow") or {}).get("batch", [])[1:]:
                    self._started[member["id"]] = run.id  # a trigger a batch gathered
            while len(self._started) > 1000:
                del self._started[next(iter(self._started))]
            self._claims.notify_all()

    def started(self, item_id: int, timeout: float) -> str | None:
        """The id of the run work item ``item_id`` started here, waiting up to ``timeout``
        seconds for its claim; None when it did not start here in that time."""
        with self._claims:
            self._claims.wait_for(lambda: item_id in self._started, timeout)
            return self._started.get(item_id)

    def start_thread(self, run: Any) -> None:
        thread = threading.Thread(
            target=self._execute, args=(run,), name=f"run-{run.id}", daemon=True
        )
        self.threads[run.id] = thread
        thread.start()

    def _execute(self, run: Any) -> None:
        final = None
        try:
            final = self.runner.run(run)
        except Exception:  # the runner never raises; this is the last line of defence
            log.exception("run %s crashed", run.id)
        finally:
            self.threads.pop(run.id, None)
            if final is not None:  # it ran (not put back): its room is free for the next
                self._deferred.pop(run.agent, None)
            self.wakeup.set()

    def kill(self, run_id: str, reason: str = "killed by user") -> bool:
        """Kill an active or waiting run; True if it was live."""
        run = self.store.get_run(run_id)
        if run is None or run.state in ("done", "error", "timeout", "killed"):
            return False
        return bool(self.runner.kill(run_id, reason=reason))

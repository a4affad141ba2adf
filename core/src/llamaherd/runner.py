"""The runner: one run from sandbox start to final state, in the calling thread.

``Runner.run(run_row)`` starts a sandbox with the agent's credentials staged, runs ``hooks.pre``,
the LLM session (``llamaherd.session``), ``hooks.post``, records the final state and removes the
sandbox. A run that calls ``wait_for_trigger`` is parked instead: state ``waiting``, sandbox
paused, thread ended; a later ``run()`` of the same row (claimed from a ``resume`` item)
re-attaches and continues from the checkpointed transcript.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.agents import (
    SUSPEND_TIMEOUT,
    SUSPENSION,
    is_suspended,
    set_agent_state,
    suspend_timeout,
)
from llamaherd.errors import CommandFailed, LlamaherdError, SandboxBusy, SandboxLost
from llamaherd.injection import inject_context
from llamaherd.prompts import Environment, build_prompts, loop_mode, max_turns, suspends
from llamaherd.session import (
    CUT_SHORT,
    ENV_NAME,
    HUMAN,
    MARK_STDOUT,
    ActiveRun,
    Deferred,
    Outcome,
    Session,
    interruption,
    truncate,
)
from llamaherd.store import EXIT_CODES, FINAL_STATES, InvalidTransition, StoreError
from llamaherd.types import RunResult, SandboxSpec, TriggerEvent
from llamaherd.waits import SCRIPT_WAITS
from llamaherd.write_budget import WriteBudget

log = logging.getLogger("llamaherd.runner")

BIN_DIR = Path(__file__).parent / "sandbox_bin"
HOOK_TIMEOUT = 300.0
CRASH_PREFIX = "internal error: "  # the reason of a run that crashed the runner
CRASH_LIMIT = 3  # runs of one agent crashing the runner in a row that put the agent in error


class RunFailed(CommandFailed):
    """A step of the run failed in a way that ends it as ``error`` with this reason."""


@dataclass
class _Prepared:
    """Everything a sandbox needs that is rebuilt per process: credentials, token, spec."""

    credentials: dict[str, dict[str, str]]
    redactor: Any
    spec: SandboxSpec
    token: str
    # The session's setenv values while the run waits: the stored transcript masks them.
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class _Live:
    """An active run's handles, so kill/timeout from other threads can reach it."""

    ctx: ActiveRun
    cancel: threading.Event = field(default_factory=threading.Event)
    session: Session | None = None
    prepared: _Prepared | None = None
    pending_env: dict[str, str] = field(default_factory=dict)  # setenv before the session
    pending_messages: list[str] = field(default_factory=list)  # al say before the session
    stopped: str | None = None  # "killed" | "timeout" once forced to end
    lost: bool = False  # its sandbox went away with its host (SandboxLost): requeued
    timer: threading.Timer | None = None


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Runner:
    """Executes runs for an Engine; ``active()`` lists the runs it holds a thread for."""

    def __init__(self, engine: Any):
        self.engine = engine
        self._live: dict[str, _Live] = {}
        # Sandboxes of waiting (or just re-attached) runs, kept for the next run() of the row.
        self._parked: dict[str, tuple[Any, _Prepared]] = {}
        # What each run active or waiting here has written (``llamaherd.write_budget``).
        self._budgets: dict[str, WriteBudget] = {}
        self._lock = threading.Lock()

    @property
    def store(self) -> Any:
        return self.engine.store

    def active(self) -> set[str]:
        with self._lock:
            return set(self._live)

    def is_active(self, run_id: str) -> bool:
        """Is the run executing in this process (not parked, not ended)?"""
        with self._lock:
            return run_id in self._live

    def live(self, run_id: str) -> _Live | None:
        """The live handles of an active run (the gateway uses them for ``setenv``)."""
        with self._lock:
            return self._live.get(run_id)

    def write_budget(self, run_id: str) -> WriteBudget:
        """The run's write budget, shared by everything that writes for it in this process;
        it starts from what the store holds of the run (a restart, a resume, another host)."""
        with self._lock:
            budget = self._budgets.get(run_id)
        if budget is None:
            budget = WriteBudget(*self.store.run_writes(run_id))
            with self._lock:
                budget = self._budgets.setdefault(run_id, budget)
        return budget

    # ------------------------------------------------------------------ public API

    def run(self, row: Any) -> Any:
        """Execute a fresh run or continue a resumed one; never raises; returns the final row
        (None for a run put back in its queue: its runtime had no room, ``SandboxBusy``)."""
        log.info(
            "run %s of %s %s (%s trigger)",
            row.id, row.agent, "resumed" if row.transcript else "started", row.trigger_kind,
        )  # fmt: skip
        try:
            self._run(row)
        except Exception as exc:  # the last line of defence: record, never propagate
            log.exception("run %s crashed", row.id)
            reason = f"{CRASH_PREFIX}{type(exc).__name__}: {exc}"
            live = self.live(row.id)
            # The sandbox first: its processes must end even when the store cannot record
            # anything (a full disk); the scheduler then ends the run as interrupted.
            if live is not None and live.ctx.sandbox is not None:
                self._discard_sandbox(row, live.ctx.sandbox)
            try:
                self._transition(row.id, "error", reason)
                if live is None or live.session is None:  # crashed before its session
                    self._hold(row, f"the runner crashed at start: {reason}")
                elif self._crashing(row.agent):
                    self._hold(row, f"{CRASH_LIMIT} runs in a row crashed; last: {reason}")
            except StoreError as store_exc:
                log.error("run %s: cannot record its end: %s", row.id, store_exc)
        finally:
            with self._lock:
                live = self._live.pop(row.id, None)
            if live and live.timer:
                live.timer.cancel()
            # Its blocked al-wait commands end with it (parked: its thread is gone), so no
            # event is handed to a wait nobody reads.
            SCRIPT_WAITS.end_run(row.id, "the run ended or parked")
        try:
            final = self.store.get_run(row.id)
        except StoreError:
            return None
        if final is None or final.state in FINAL_STATES:
            with self._lock:
                self._budgets.pop(row.id, None)
        _log_end(final)
        return final

    def kill(self, run_id: str, reason: str = "killed by user", state: str = "killed") -> bool:
        """End a queued, active or waiting run now; True if it was live."""
        with self._lock:
            live = self._live.get(run_id)
        if live is not None:
            return self._force_stop(live, state, reason)
        row = self.store.get_run(run_id)
        if row is None or row.state in FINAL_STATES:
            return False
        if not self._transition(run_id, state, reason):
            return False
        with self._lock:
            self._budgets.pop(run_id, None)
        self._discard_sandbox(row)
        return True

    def attach(self, row: Any) -> bool:
        """Re-attach to the sandbox of a run left behind by a dead scheduler (recovery).

        True when the sandbox is still there; the next ``run(row)`` continues the session from
        its checkpoint in it.
        """
        agent = self.engine.project.agents.get(row.agent)
        runtime = self._runtime(agent) if agent else None
        if runtime is None or not row.sandbox:
            return False
        try:
            prepared = self._prepare(row, agent)
            sandbox = runtime.attach(row.sandbox, prepared.spec)
        except Exception as exc:
            log.warning("run %s: cannot re-attach its sandbox: %s", row.id, exc)
            return False
        if sandbox is None or not sandbox.alive():
            return False
        self._parked[row.id] = (sandbox, prepared)
        return True

    def setenv(self, run_id: str, name: str, value: str) -> None:
        """``setenv`` from a hook or script: an env var for the model's later bash calls."""
        live = self.live(run_id)
        if live is None:
            raise LookupError(f"run {run_id} is not active")
        if not ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid variable name")
        if live.session is not None:
            live.session.setenv(name, value)
        else:
            live.ctx.keep_env(name, value)
            live.pending_env[name] = value

    def expire_wait(self, row: Any) -> None:
        """A waiting run passed its deadline: resume it with an error tool result.

        A suspended run (paused at its turn limit) the owner did not answer in time is killed
        instead, and its agent switched ``off``. A run waiting for a human: an ``ask`` gets an
        error result, a ``respond`` (the human's turn) ends the run ``done``."""
        if is_suspended(row):
            why = f"suspension not answered within suspendTimeout ({suspend_timeout(row):g} s)"
            if self.store.agent_state(row.agent) == "suspended":
                set_agent_state(self.engine, row.agent, "off", f"run {row.id}: {why}")  # kills it
            else:  # the owner has set the agent's state since: it stands
                self.kill(row.id, reason=why)
            return
        self.store.resume_waiting(row.id, _timed_out(row))
        self.engine.wakeup.set()

    def interrupt(self, run_id: str, message: str) -> bool:
        """``al say`` to a run active here: its current turn is cut short and ``message`` is
        its next input (held until its session starts, if it is in hooks.pre). False when the
        run is not active in this process."""
        live = self.live(run_id)
        if live is None:
            return False
        if live.session is not None:
            live.session.interrupt(message)
        else:
            live.pending_messages.append(message)
        return True

    # ------------------------------------------------------------------ one run

    def _run(self, row: Any) -> None:
        agent = self.engine.project.agents.get(row.agent)
        if agent is None:
            self._transition(row.id, "error", f"agent {row.agent!r} no longer exists")
            return
        resumed = bool(row.transcript)
        trigger = row.trigger or {}
        ctx = ActiveRun(
            row.id,
            agent,
            self.engine,
            self.store,
            trigger=trigger,
            loop_mode=loop_mode(agent, trigger),
        )
        live = _Live(ctx)
        ctx.stopped = live.cancel  # its store writes are retried until it is stopped
        with self._lock:
            self._live[row.id] = live
        try:
            sandbox, prepared = self._sandbox(row, agent, resumed)
        except SandboxBusy as exc:
            if not resumed and self.store.unclaim(row.id):
                log.info(
                    "run %s of %s put back in its queue, unstarted: %s", row.id, row.agent, exc
                )
                self.engine.defer(row.agent, exc.retry_after)
                return
            self._transition(row.id, "error", live.ctx.redact(str(exc)))
            return
        except (LlamaherdError, OSError) as exc:
            reason = live.ctx.redact(str(exc))
            live.ctx.log("run_error", {"reason": reason, "stage": "sandbox"})
            self._transition(row.id, "error", reason)
            # No sandbox for a fresh run (image, user, runtime): structural, unless its host
            # is only out of reach for now.
            if not resumed and not isinstance(exc, SandboxLost):
                self._hold(row, reason)
            return
        live.ctx.sandbox, live.ctx.redactor, live.prepared = sandbox, prepared.redactor, prepared
        left = _time_left(row, agent)
        # One write before any sandbox command: handle for re-attach, token hash, deadline.
        started = {
            "sandbox": sandbox.handle(),
            "token_hash": token_hash(prepared.token),
            "deadline": self.engine.clock() + left,
        }
        live.ctx.record(lambda: self.store.update_run(row.id, **started))
        outcome = self._drive(row, live, prepared, resumed, left)
        if outcome.state == "waiting":
            self._park(row, live, outcome)
            return
        self._finish(row, live, outcome)

    def _sandbox(self, row: Any, agent: Any, resumed: bool) -> tuple[Any, _Prepared]:
        """Start a fresh sandbox, or get the parked / re-attached one of a resumed run."""
        runtime = self._runtime(agent)
        if runtime is None:
            raise RunFailed(self._missing_runtime(agent))
        if resumed:
            parked = self._parked.pop(row.id, None)
            if parked is None:
                prepared = self._prepare(row, agent)
                sandbox = runtime.attach(row.sandbox or {}, prepared.spec)
                if sandbox is None:
                    raise RunFailed("the run's sandbox is gone (could not re-attach after restart)")
            else:
                sandbox, prepared = parked
            sandbox.resume()
            return sandbox, prepared
        stale = self._parked.pop(row.id, None)  # re-attached before any checkpoint: start over
        if stale is not None:
            self._discard_sandbox(row, stale[0])
        prepared = self._prepare(row, agent)
        runtime.prepare(agent, self.engine.project)
        return runtime.start(prepared.spec), prepared

    def _prepare(self, row: Any, agent: Any) -> _Prepared:
        """Credentials, redactor, a fresh gateway token and the SandboxSpec."""
        from llamaherd.credentials import (
            credential_env,
            credential_files,
            load_for_agent,
            secret_values,
        )
        from llamaherd.redact import Redactor
        from llamaherd.shared_dir import shared_files

        types = self.engine.registry.credential_types
        creds = load_for_agent(agent, self.engine.registry, self.engine.credentials)
        token = secrets.token_urlsafe(32)
        # The run token is masked too: it shows up in `env` output like any credential.
        redactor = Redactor(secret_values(types, creds)).plus([token])
        env = {
            "AL_GATEWAY_URL": self.engine.gateway_url,
            "AL_RUN_TOKEN": token,
            "AL_RUN_ID": row.id,
            "AL_AGENT": agent.name,
        }
        spec = SandboxSpec(
            run_id=row.id,
            agent=agent,
            project=self.engine.project,
            credential_files=credential_files(types, creds),
            env=env,
            bin_dir=BIN_DIR,
            timeout=agent.timeout,
            credential_env=lambda root: credential_env(types, creds, root),
            gateway_socket=self.engine.gateway_socket,
            shared_files=shared_files(self.engine.project.root)[0],
            store=self.store,
        )
        return _Prepared(creds, redactor, spec, token)

    def _drive(
        self, row: Any, live: _Live, prepared: _Prepared, resumed: bool, left: float
    ) -> Outcome:
        """Hooks.pre (fresh runs) and the session, under the run's deadline (``left`` s)."""
        ctx = live.ctx
        deadline = self.engine.clock() + left
        try:
            chain = self._chain(ctx, live, prepared)
            why = f"run timed out after {ctx.agent.timeout:g} s"
            live.timer = threading.Timer(left, self._force_stop, (live, "timeout", why))
            live.timer.daemon = True
            live.timer.start()
            session_kw = {
                "tools": self._skill_tools(),
                "max_turns": max_turns(ctx.agent),
                "options": self._options(ctx, row),
                "time_left": lambda: deadline - self.engine.clock(),
                "human_timeout": float(ctx.agent.wait_timeout or 1800),
                "credentials": prepared.credentials,
            }
            if suspends(ctx.agent):  # an agent's own maxTurns pauses for approval
                session_kw["on_turn_limit"] = _suspend
            if resumed:
                live.session = Session(ctx, chain, row.transcript, env=prepared.env, **session_kw)
                return self._session(live, resume=_resume_payload(row))
            self.engine.run_hook("run_started", run=ctx)
            self._hooks(live, "pre")
            if ctx.state_change is not None:  # a pre hook ran `state ...`: no session
                return Outcome("done", reason=f"the agent set its state to {ctx.state_change}")
            body = inject_context(ctx, live.pending_env, live.cancel)
            system, user = build_prompts(
                ctx.agent,
                self.engine.registry,
                ctx.trigger,
                run=ctx,
                environment=Environment(
                    cwd=ctx.sandbox.workdir,
                    timeout=ctx.agent.timeout,
                    max_turns=max_turns(ctx.agent),
                    turn_limit_pauses=suspends(ctx.agent),
                ),
                credential_store=self.engine.credentials,
                body=body,
            )
            live.session = Session.start(ctx, chain, system, user, **session_kw)
            for name, value in live.pending_env.items():
                live.session.setenv(name, value)
            for message in live.pending_messages:
                live.session.interrupt(message)
            return self._session(live)
        except SandboxLost as exc:
            live.lost = True
            return Outcome("error", reason=ctx.redact(f"interrupted: {exc}"))
        except LlamaherdError as exc:
            return Outcome("error", reason=ctx.redact(str(exc)))

    def _session(self, live: _Live, resume: dict[str, Any] | None = None) -> Outcome:
        assert live.session is not None
        if live.cancel.is_set():
            live.session.stop()
        return live.session.run(resume)

    def _chain(self, ctx: ActiveRun, live: _Live, prepared: _Prepared) -> Any:
        from llamaherd.credentials import secret_values
        from llamaherd.models import ModelChain
        from llamaherd.redact import Redactor

        def key_lookup(type_name: str, instance: str) -> dict[str, str] | None:
            return self.engine.credentials.read(type_name, instance)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "provider_error":  # transient: retried, never the agent's state
                data = {"level": "warn", "origin": "executor", "event": kind, **data}
                log.warning(
                    "run %s: provider error (%s): %s",
                    ctx.run_id,
                    data.get("action"),
                    ctx.redact(str(data.get("message"))),
                )
            ctx.log(kind, data)

        chain = ModelChain(
            self.engine.project,
            ctx.agent,
            self.engine.registry,
            key_lookup,
            on_event=on_event,
            sleep=live.cancel.wait,
        )
        # The model keys never reach the sandbox, but are masked in whatever is stored anyway.
        model_keys = [s for entry in chain.entries for s in entry.secrets]
        staged = secret_values(self.engine.registry.credential_types, prepared.credentials)
        redactor = Redactor([*staged, *model_keys]).plus([prepared.token])
        prepared.redactor = ctx.redactor = redactor
        return chain

    def _skill_tools(self) -> dict[str, Any]:
        from llamaherd.session import skill_tools

        return skill_tools(self.engine.registry)

    def _options(self, ctx: ActiveRun, row: Any) -> dict[str, Any]:
        trigger = ctx.trigger
        return {
            "agent_dir": str(ctx.agent.path),
            "params": ctx.agent.params,
            "trigger": {k: trigger.get(k) for k in ("kind", "payload", "source")},
            "run_id": row.id,
        }

    def _hooks(self, live: _Live, phase: str) -> None:
        """Run ``hooks.<phase>`` in order; a failing pre hook raises RunFailed."""
        ctx = live.ctx
        for command in ctx.agent.hooks[phase]:
            if live.cancel.is_set() or ctx.state_change == "off":  # off: at once
                return
            result = ctx.sandbox.exec(
                "/bin/sh -c " + shlex.quote(MARK_STDOUT + command),
                cwd=ctx.sandbox.workdir,
                timeout=HOOK_TIMEOUT,
            )
            ctx.settle_after_call()
            output = ctx.redact(truncate(result.output, 4000))
            ctx.log(
                "hook",
                {
                    "phase": phase,
                    "command": command,
                    "exit_code": result.exit_code,
                    "timed_out": result.timed_out,
                    "duration": result.duration,
                    "output": output,
                },
            )
            if result.exit_code != 0 and phase == "pre" and not live.cancel.is_set():
                why = "timed out" if result.timed_out else f"exited {result.exit_code}"
                raise RunFailed(f"hooks.pre command {command!r} {why}: {output.strip()}")

    # ------------------------------------------------------------------ endings

    def _park(self, row: Any, live: _Live, outcome: Outcome) -> None:
        """wait_for_trigger: store the wait, pause the sandbox, free the thread."""
        ctx, session = live.ctx, live.session
        assert outcome.deferred is not None and session is not None
        if live.timer:
            live.timer.cancel()
        now = self.engine.clock()
        remaining = (self.store.get_run(row.id).deadline or now) - now
        session.meta["time_left"] = max(1.0, remaining)
        session.checkpoint()
        live.prepared.env = dict(session.env)  # kept here, not in the stored transcript
        data = outcome.deferred.data
        try:
            self.store.set_waiting(row.id, data["filter"], now + float(data["timeout"]))
        except InvalidTransition:
            self._discard_sandbox(row, ctx.sandbox)  # killed in the meantime
            return
        ctx.sandbox.pause()
        with self._lock:
            self._parked[row.id] = (ctx.sandbox, live.prepared)
        leftover = session.leftover_messages()  # `al say` just as it parked: resume at once
        if leftover:
            message = "\n\n".join(interruption(text) for text in leftover)
            resume = {"result": CUT_SHORT, "is_error": True, "message": message}
            self.store.resume_waiting(row.id, resume)
            self.engine.wakeup.set()
        if outcome.deferred.kind != SUSPENSION:
            ctx.log("wait", {"filter": data["filter"], "timeout": data["timeout"]})
            return
        why = f"run {row.id} reached maxTurns ({data['filter']['max_turns']})"
        ask = (
            f"`al approve {row.id}` resumes it, `al deny {row.id}` stops it; without an "
            f"answer within {data['timeout']:g} s it is killed and its agent switched off"
        )
        ctx.log("suspended", {"reason": f"{why}; {ask}"})
        self.store.set_agent_state(row.agent, "suspended", why)
        log.warning("%s: suspended; %s", why, ask)

    def _finish(self, row: Any, live: _Live, outcome: Outcome) -> None:
        ctx = live.ctx
        if live.timer:
            live.timer.cancel()
        # A tool call cut to the time left ends just as the deadline passes, and the session
        # may finish before the timer fires: past its deadline a run has timed out.
        deadline = self.store.get_run(row.id).deadline
        if live.stopped is None and deadline is not None and self.engine.clock() >= deadline:
            self._force_stop(live, "timeout", f"run timed out after {ctx.agent.timeout:g} s")
        if live.stopped is None and not live.lost:  # its sandbox is gone: no post hooks
            try:
                self._hooks(live, "post")
            except LlamaherdError as exc:
                ctx.log("hook_error", {"phase": "post", "error": str(exc)})
        state, reason = _final_state(outcome)
        if live.stopped is None:
            ctx.record(lambda: self._transition(row.id, state, reason, outcome.exit_code))
        final = self.store.get_run(row.id)
        result = RunResult(
            final.state,
            final.exit_code if final.exit_code is not None else 1,
            final.reason,
            final.return_value,
            outcome.text,
        )
        self.engine.run_hook("run_finished", run=ctx, result=result)
        self._discard_sandbox(row, ctx.sandbox)
        if live.lost and live.stopped is None:
            self.engine.requeue_interrupted(final)
        self._maybe_rerun(final, ctx)

    def _maybe_rerun(self, final: Any, ctx: ActiveRun) -> None:
        """A scheduled run that ended done and asked for a rerun is queued again at once."""
        if final.trigger_kind != "scheduled" or final.state != "done" or not final.rerun_requested:
            return
        if final.rerun_count >= ctx.agent.max_reruns:
            ctx.log("rerun_refused", {"reason": f"maxReruns ({ctx.agent.max_reruns}) reached"})
            return
        self.engine.emit(
            TriggerEvent(
                agent=final.agent,
                kind="scheduled",
                payload=ctx.trigger.get("payload") or {},
                prompt=ctx.trigger.get("prompt") or "",
                source=ctx.trigger.get("source"),
                rerun_count=final.rerun_count + 1,
            )
        )

    def _force_stop(self, live: _Live, state: str, reason: str) -> bool:
        """Kill or time out an active run from another thread: record it, kill the sandbox."""
        if live.stopped is not None:
            return False
        live.stopped = state
        live.cancel.set()
        if live.session is not None:
            live.session.stop()  # the model request in flight is cut off too
        self._transition(live.ctx.run_id, state, reason)
        if live.ctx.sandbox is not None:
            try:
                live.ctx.sandbox.kill()
            except Exception as exc:
                log.warning("run %s: sandbox kill failed: %s", live.ctx.run_id, exc)
        return True

    def _discard_sandbox(self, row: Any, sandbox: Any = None) -> None:
        """Kill and remove a run's sandbox (parked, passed in, or re-attached from its handle)."""
        parked = self._parked.pop(row.id, None)
        sandbox = sandbox or (parked[0] if parked else None)
        if sandbox is None and row.sandbox:
            agent = self.engine.project.agents.get(row.agent)
            runtime = self._runtime(agent) if agent else None
            try:
                sandbox = runtime.attach(row.sandbox, None) if runtime else None
            except Exception as exc:
                log.warning("run %s: cannot re-attach its sandbox to remove it: %s", row.id, exc)
        if sandbox is None:
            return
        try:
            sandbox.kill()
            sandbox.cleanup()
        except Exception as exc:
            log.warning("run %s: sandbox cleanup failed: %s", row.id, exc)

    def _crashing(self, agent: str) -> bool:
        """Whether the agent's last CRASH_LIMIT runs all crashed the runner."""
        last = self.store.runs(agent=agent, states=FINAL_STATES, limit=CRASH_LIMIT)
        crashed = [r for r in last if (r.reason or "").startswith(CRASH_PREFIX)]
        return len(crashed) == CRASH_LIMIT

    def _hold(self, row: Any, reason: str) -> None:
        """A structural failure: the agent goes ``error`` and its triggers are held."""
        cause = f"run {row.id}: {reason}"
        log.error("agent %s held in error: %s", row.agent, cause)
        self.store.set_agent_state(row.agent, "error", cause)

    def _transition(
        self, run_id: str, state: str, reason: str | None, exit_code: int | None = None
    ) -> bool:
        code = EXIT_CODES.get(state) if exit_code is None else exit_code
        try:
            self.store.transition(run_id, state, reason=reason, exit_code=code)
            return True
        except InvalidTransition:
            return False  # already ended (killed or timed out meanwhile)

    def _runtime(self, agent: Any) -> Any:
        return self.engine.registry.runtimes.get(agent.runtime["type"])

    def _missing_runtime(self, agent: Any) -> str:
        from llamaherd.plugins import PROVIDED_BY

        name = agent.runtime["type"]
        dist = PROVIDED_BY.get(("runtimes", name))
        hint = f"; install {dist}" if dist else ""
        return f"{agent.config_file}: runtime.type: runtime {name!r} is not installed{hint}"


def _log_end(final: Any) -> None:
    """The scheduler log's line for a run that ended (or parked, waiting for a trigger)."""
    if final is None:
        return
    took = ""
    if final.started_at and final.finished_at:
        took = f" after {final.finished_at - final.started_at:.1f} s"
    code = "" if final.exit_code is None else f" (exit {final.exit_code})"
    reason = f": {final.reason}" if final.reason and final.state != "done" else ""
    log.info("run %s of %s %s%s%s%s", final.id, final.agent, final.state, code, took, reason)


def _final_state(outcome: Outcome) -> tuple[str, str | None]:
    if outcome.state == "done":
        return "done", outcome.reason
    if outcome.state == "cancelled":
        return "killed", "cancelled"
    return "error", outcome.reason


def _suspend(session: Session) -> Outcome:
    """``on_turn_limit`` of an agent with ``maxTurns``: park the run until the owner answers."""
    timeout = float(session.ctx.agent.config.get("suspendTimeout", SUSPEND_TIMEOUT))
    limit = {
        "type": SUSPENSION,
        "turns": session.meta["turns"],
        "max_turns": session.max_turns,
        "timeout": timeout,
    }
    return Outcome("waiting", deferred=Deferred(SUSPENSION, {"filter": limit, "timeout": timeout}))


def _timed_out(row: Any) -> dict[str, Any]:
    """The resume of a wait past its deadline: an error result (a respond: the end)."""
    wait = row.wait_filter or {}
    if wait.get("type") == HUMAN and wait.get("kind") == "respond":
        return {"end": True, "reason": "the human did not answer before the wait timed out"}
    if wait.get("type") == HUMAN:
        what = "ask timed out: no human answered before its deadline"
    else:
        what = (
            f"wait_for_trigger timed out: no trigger matching {row.wait_filter} arrived "
            "before its deadline"
        )
    return {"result": what, "is_error": True, "timeout": True}


def _time_left(row: Any, agent: Any) -> float:
    """Seconds of the run's timeout left: all of it, or what a parked run had left."""
    meta = row.transcript[0] if row.transcript else {}
    return float(meta.get("time_left") or 0) or agent.timeout


def _resume_payload(row: Any) -> dict[str, Any] | None:
    """The result a resumed run's pending tool call gets (put there by waits / expire_wait)."""
    return (row.trigger or {}).get("resume_payload")

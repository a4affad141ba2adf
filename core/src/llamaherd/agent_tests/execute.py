"""One test case, start to end: the fenced engine, the run, what it did, what it failed.

``run_case`` builds the case's event with its trigger type (``case_event``), creates the run
in the private store and runs it in the calling thread, exactly as a scheduler's dispatcher
thread would (sandbox, hooks, session, checkpoints). A run that parks is answered from the
case: a ``wait_for_trigger`` by the next of its ``[[events]]`` (else its wait times out at
once), a human's turn by the next of its ``replies`` (else the conversation ends), a
suspension at ``maxTurns`` is denied. Then every ``[expect]`` key is checked.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.agent_tests.cases import Case
from llamaherd.agent_tests.cassette import Cassette, now_iso
from llamaherd.agent_tests.expectations import matches
from llamaherd.agent_tests.fence import (
    CaseCredentials,
    FencedEngine,
    Overrides,
    fenced_project,
    private_store,
)
from llamaherd.agent_tests.tape import Fork, Tape
from llamaherd.errors import ConfigError, LlamaherdError
from llamaherd.project import Agent, Project
from llamaherd.types import CaseRun, TriggerEvent, Unmet

PASSED, FAILED, ERROR = "passed", "failed", "error"

log = logging.getLogger(__name__)


@dataclass
class Failure:
    """One reason a case did not pass: the expectation (``expect.commands[0]``, ``cassette``,
    ``trigger``...), one line, and the run's lines that show it."""

    where: str
    message: str
    details: list[str] = field(default_factory=list)


@dataclass
class CaseResult:
    case: Case
    outcome: str
    duration: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    run: CaseRun | None = None
    tape: Tape | None = None
    notes: list[str] = field(default_factory=list)  # e.g. "cassette recorded: 4 turns"

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED


# ------------------------------------------------------------------------------ events


def case_event(spec: dict[str, Any], agent: Agent, registry: Any) -> TriggerEvent:
    """The event a case's ``[trigger]`` (or one of its ``[[events]]``) stands for: the payload
    as written when it gives ``event_payload``, else built by its trigger type's
    ``case_event``, else the payload and prompt as written."""
    from llamaherd.triggers import for_kind, trigger_kind

    kind = str(spec["kind"])
    trigger_type = for_kind(registry, kind)
    if trigger_type is None:
        kinds = sorted(trigger_kind(t) for t in registry.trigger_types.values())
        raise LlamaherdError(
            f"kind: no installed trigger type emits {kind!r} (kinds: {', '.join(kinds)})"
        )
    source = spec.get("source")
    if "event_payload" in spec:
        return TriggerEvent(
            agent.name, kind, spec["event_payload"], str(spec.get("prompt_block", "")), source
        )
    build = getattr(trigger_type, "case_event", None)
    if build is not None:
        return build(agent, spec)
    return TriggerEvent(
        agent.name, kind, dict(spec.get("payload") or {}), str(spec.get("prompt", "")), source
    )


def trigger_of(event: TriggerEvent, now: float) -> dict[str, Any]:
    """A run's ``trigger`` as a claim would copy it from the queued item."""
    return {
        "kind": event.kind,
        "payload": event.payload,
        "prompt": event.prompt,
        "source": event.source,
        "recovery": event.recovery,
        "queued_at": now,
        "claimed_at": now,
    }


# ------------------------------------------------------------------------------ one case


@dataclass
class Plan:
    """How a case is run: the tape's mode (replay, update, live), a fork, agent overrides."""

    mode: str = "replay"
    overrides: Overrides | None = None
    fork: Fork | None = None
    cassette: Cassette | None = None  # instead of the case's file (al replay)


def run_cases(
    project: Project,
    registry: Any,
    cases: list[Case],
    plan_of: Callable[[Case], Plan],
    *,
    workers: int = 1,
    repeat: int = 1,
    on_result: Callable[[CaseResult], None] = lambda result: None,
) -> list[CaseResult]:
    """Run every case ``repeat`` times, ``workers`` at a time (each in its own fenced engine
    and sandbox; more than one: in worker processes); the results in the cases' order. Ctrl-C
    ends the runs going on and their sandboxes before it propagates."""
    from llamaherd.agent_tests.fence import private_area, remove_area
    from llamaherd.agent_tests.workers import run_forked

    area = private_area(project, registry)
    jobs = [case for case in cases for _ in range(repeat)]

    def work(case: Case) -> CaseResult:
        return run_case(project, registry, case, area, plan_of(case))

    try:
        if workers > 1 and len(jobs) > 1:
            _before_forking(project, registry)
            return run_forked(jobs, work, workers, _lost, on_result)
        results = []
        for case in jobs:
            results.append(work(case))
            on_result(results[-1])
        return results
    finally:
        remove_area(area)


def _before_forking(project: Project, registry: Any) -> None:
    """What a case's run does once per process, done once before the workers are forked
    (each would do it again, on every core): the imports, every plugin kind collected, the
    sweep of stale gateway socket folders (a listing of /tmp)."""
    import llamaherd.agents  # noqa: F401
    import llamaherd.runner  # noqa: F401
    import llamaherd.server  # noqa: F401
    from llamaherd.engine import remove_stale_socket_dirs, socket_prefix

    registry.complete()
    remove_stale_socket_dirs(socket_prefix(project.root))


def _lost(case: Case, why: str) -> CaseResult:
    return CaseResult(case, ERROR, failures=[Failure("run", f"{why} (the case did not end)")])


def run_case(
    project: Project, registry: Any, case: Case, area: Path, plan: Plan | None = None
) -> CaseResult:
    """Run ``case`` in its own fenced engine (its store a file in ``area``) and check it."""
    plan = plan or Plan()
    started = time.monotonic()
    result = CaseResult(case, ERROR)
    try:
        tape = _tape(case, plan)
        result.tape = tape
        result.run = _run(project, registry, case, area, tape, plan, result)
    except ConfigError as exc:
        result.failures.append(Failure(exc.key or "case", f"{exc.file}: {exc.message}"))
    except LlamaherdError as exc:  # the trigger cannot be built, the engine cannot serve...
        result.failures.append(Failure("run", str(exc)))
    if result.run is not None:
        _judge(registry, case, result)
        _save(case, plan, result)
    result.duration = time.monotonic() - started
    return result


def _tape(case: Case, plan: Plan) -> Tape:
    mode = "live" if case.live else plan.mode
    recorded = plan.cassette
    if recorded is None and mode != "live" and case.cassette is not None:
        if case.cassette.is_file():
            recorded = Cassette.load(case.cassette)
        elif mode == "replay":
            raise ConfigError(
                str(case.path),
                "model.cassette",
                f"no cassette {case.cassette.name}: record it with `al test {case.agent} "
                f"-k {case.name} --update` (the live model answers, the cassette is written)",
            )
    return Tape(mode, recorded, case.match, case.ignore, plan.fork, agent=case.agent)


def _run(
    project: Project,
    registry: Any,
    case: Case,
    area: Path,
    tape: Tape,
    plan: Plan,
    result: CaseResult,
) -> CaseRun | None:
    overrides = plan.overrides or Overrides()
    overrides.params = {**case.params, **overrides.params}
    slug = f"{case.agent}-{case.name}-{os.getpid()}-{time.monotonic_ns()}"
    fenced = fenced_project(project, private_store(area, slug), case.agent, overrides)
    credentials = CaseCredentials(
        area / f"{slug}-credentials", registry, case.credentials, live=tape.may_go_live
    )
    engine = FencedEngine(fenced, credentials, tape, case.calls, case.files(), matches)
    row = None
    try:
        engine.serve("127.0.0.1", 0)
        agent = fenced.agent(case.agent)
        event = case_event(case.trigger, agent, engine.registry)
        now = engine.clock()
        payload = event.payload if event.kind == "agent" else {}
        row = engine.store.create_run(
            agent.name,
            event.kind,
            trigger=trigger_of(event, now),
            host=engine.host,
            call_depth=int(payload.get("depth") or 0),
            caller_run=payload.get("caller_run"),
        )
        _drive(engine, case, agent, row, result)
        return _what_it_did(engine, row.id)
    except BaseException:  # Ctrl-C, SIGTERM: the run does not outlive al test, nor its sandbox
        if row is not None:
            _end(engine, row.id)
        raise
    finally:
        engine.stopping.set()
        engine.close()


def _end(engine: FencedEngine, run_id: str) -> None:
    try:
        engine.runner.kill(run_id, reason="al test was interrupted")
    except Exception:  # what interrupted the case is what al test reports
        log.exception("test run %s: cannot end it and its sandbox", run_id)


def _drive(engine: FencedEngine, case: Case, agent: Agent, row: Any, result: CaseResult) -> None:
    """Run ``row`` to its end, answering each of its waits from the case."""
    events, replies = list(enumerate(case.events)), list(case.replies)
    while True:
        final = engine.runner.run(row)
        if final is None or final.state != "waiting":
            return
        if not _answer(engine, agent, final, events, replies, result):
            return
        claimed = engine.claims(1)
        if not claimed:
            engine.runner.kill(final.id, reason="a test run could not be resumed")
            return
        row = claimed[0][1]


def _answer(
    engine: FencedEngine,
    agent: Agent,
    run: Any,
    events: list[tuple[int, dict[str, Any]]],
    replies: list[str],
    result: CaseResult,
) -> bool:
    """Resume a parked run from the case; False when it was ended instead."""
    from llamaherd.agents import SUSPENSION, reply_to_run

    wait = run.wait_filter or {}
    if wait.get("type") == SUSPENSION:
        engine.runner.kill(
            run.id, reason=f"suspended at maxTurns ({wait.get('max_turns')}): a test run is denied"
        )
        return False
    if wait.get("type") == "human":
        if replies:
            reply_to_run(engine, run.id, replies.pop(0))
        elif wait.get("kind") == "respond":
            reply_to_run(engine, run.id, "", end=True)
        else:
            engine.runner.expire_wait(run)
        return True
    if events:
        index, spec = events.pop(0)
        event = case_event(spec, agent, engine.registry)
        if run.id in engine.emit(event).resumed:
            return True
        result.failures.append(
            Failure(
                f"events[{index}]",
                f"did not match the run's wait {wait} (the wait timed out instead)",
            )
        )
    engine.runner.expire_wait(run)
    return True


# ------------------------------------------------------------------------------ what it did


def _what_it_did(engine: FencedEngine, run_id: str) -> CaseRun:
    store = engine.store
    run = store.get_run(run_id)
    files, calls = dict(engine.final_files), list(engine.calls)
    return case_run(run, store.events(run_id), engine.final_text, files, calls)


def case_run(
    row: Any,
    events: list[dict[str, Any]],
    text: str | None = None,
    files: dict[str, bytes | None] | None = None,
    calls: list[dict[str, Any]] | None = None,
) -> CaseRun:
    """What a stored run did, from its row and events (``text``: the model's last text, by
    default its last in the transcript)."""
    transcript = row.transcript or []
    meta = transcript[0] if transcript and transcript[0].get("role") == "meta" else {}
    messages = transcript[1:] if meta else transcript
    tool_calls, texts = conversation_of(messages)
    return CaseRun(
        run_id=row.id,
        agent=row.agent,
        state=row.state,
        exit_code=row.exit_code,
        reason=row.reason,
        return_value=row.return_value,
        status=row.status,
        text=(texts[-1] if texts else "") if text is None else text,
        texts=texts,
        tool_calls=tool_calls,
        commands=commands_of(events),
        files=files or {},
        transitions=[e["data"].get("to") for e in events if e["type"] == "state"],
        waits=[
            {"filter": e["data"].get("filter"), "timeout": e["data"].get("timeout")}
            for e in events
            if e["type"] == "wait"
        ],
        calls=calls or [],
        turns=int(meta.get("turns", 0)),
        input_tokens=int(meta.get("input_tokens", 0)),
        output_tokens=int(meta.get("output_tokens", 0)),
        cost_usd=float(meta.get("cost_usd", 0.0)),
        unpriced_turns=int(meta.get("unpriced_turns", 0)),
        events=events,
    )


def conversation_of(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The model's tool calls (with their results) and texts, from the transcript."""
    results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    calls, texts, turn = [], [], 0
    for message in messages:
        if message.get("role") != "assistant":
            continue
        turn += 1
        texts.append(str(message.get("content") or ""))
        for call in message.get("tool_calls") or []:
            answer = results.get(call.get("id")) or {}
            calls.append(
                {
                    "turn": turn,
                    "name": call.get("name"),
                    "arguments": call.get("arguments") or {},
                    "result": answer.get("content"),
                    "is_error": bool(answer.get("is_error")),
                }
            )
    return calls, texts


def commands_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hook commands and the model's bash calls, in the order they ran."""
    found = []
    for event in events:
        data = event.get("data") or {}
        if event["type"] == "hook":
            found.append(
                {
                    "phase": data.get("phase"),
                    "command": data.get("command"),
                    "exit_code": data.get("exit_code"),
                    "output": data.get("output"),
                }
            )
        elif event["type"] == "tool_call" and data.get("tool") == "bash" and "deferred" not in data:
            found.append(
                {
                    "phase": "bash",
                    "command": (data.get("arguments") or {}).get("command"),
                    "exit_code": data.get("exit_code"),
                    "output": data.get("output"),
                }
            )
    return found


# ------------------------------------------------------------------------------ judging


def _judge(registry: Any, case: Case, result: CaseResult) -> None:
    tape, run = result.tape, result.run
    assert run is not None
    if tape is not None and tape.mismatch:
        path = case.cassette.name if case.cassette else "the recording"
        first, *rest = tape.mismatch
        result.failures.append(Failure("cassette", f"{path}: {first}", rest))
    expect = dict(case.expect)
    # A run that failed never passes unnoticed; after a cassette mismatch that is said already.
    if not {"state", "exit_code"} & set(expect) and not (tape and tape.mismatch):
        expect["state"] = "done"
    for name, expected in expect.items():
        expectation = registry.expectations.get(name)
        if expectation is None:  # its plugin went away since the case was read
            result.failures.append(
                Failure(f"expect.{name}", "no installed expectation of that name")
            )
            continue
        for unmet in _checked(expectation, expected, run):
            where = f"expect.{name}" + (f"[{unmet.item}]" if unmet.item is not None else "")
            result.failures.append(Failure(where, unmet.message, list(unmet.details)))
    result.outcome = FAILED if result.failures else PASSED


def _checked(expectation: Any, expected: Any, run: CaseRun) -> list[Unmet]:
    try:
        return list(expectation.check(expected, run))
    except Exception as exc:  # a plugin's bug is this expectation's failure, not the run's
        return [Unmet(f"the expectation failed to run: {type(exc).__name__}: {exc}")]


def _save(case: Case, plan: Plan, result: CaseResult) -> None:
    """``--update``: write the cassette when the live model answered a turn of a run whose
    model side ended well (a provider failure leaves the old file)."""
    tape, run = result.tape, result.run
    if plan.mode != "update" or tape is None or run is None or case.cassette is None or case.live:
        return
    if tape.live_from is None:
        result.notes.append("cassette up to date")
        return
    if any(e["type"] == "turn_error" for e in run.events):
        result.notes.append("cassette not written: a model turn failed")
        return
    tape.played.recorded = {"from": "al test --update", "at": now_iso()}
    tape.played.save(case.cassette)
    result.notes.append(
        f"cassette recorded from turn {tape.live_from}: {len(tape.played.turns)} turns"
    )

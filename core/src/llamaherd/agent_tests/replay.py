"""``al replay RUN``: a stored run's trigger run again against the agent as it is now (or with
another model, another SKILL.md, or from one of its turns on), fenced like a test, and what
changed, side by side.

Which answers the model's side gives:

- by default the run's own recorded answers while the requests match the recording (nothing
  changed, nothing is asked), then the live model from the first turn that differs;
- ``--live``, ``--model M``: the live model (M) for every turn;
- ``--from-turn N``: turns 1..N from the recording in order, their tool calls run again in the
  fresh sandbox (after ``hooks.pre``) to restore what they left there (files, the working
  directory, ``setenv`` values), then the live model from turn N+1, shown the conversation as
  the run's checkpoint at turn N holds it (the results the run saw then).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.agent_tests.execute import CaseResult, Plan, case_run, run_case
from llamaherd.agent_tests.fence import Overrides, private_area, remove_area
from llamaherd.agent_tests.record import as_case, find_finished, from_run, tests_folder
from llamaherd.agent_tests.tape import Fork
from llamaherd.errors import LlamaherdError
from llamaherd.project import Project
from llamaherd.types import CaseRun

CELL = 80  # characters of one cell of the side-by-side


@dataclass
class Row:
    what: str
    original: str
    replay: str

    @property
    def differs(self) -> bool:
        return self.original != self.replay


@dataclass
class Replayed:
    original: CaseRun
    result: CaseResult
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def replay(
    project: Project,
    registry: Any,
    store: Any,
    target: str,
    *,
    model: str | None = None,
    skill: Path | None = None,
    from_turn: int | None = None,
    live: bool = False,
) -> Replayed:
    run = find_finished(store, target)
    found = from_run(project, registry, store, run, "replay")
    turns = len(found.cassette.turns)
    fork = None
    if from_turn is not None:
        if not 1 <= from_turn < turns:
            raise LlamaherdError(
                f"--from-turn {from_turn}: run {run.id} has {turns} turns; fork after one of "
                f"turns 1..{turns - 1}"
            )
        fork = Fork(from_turn, found.cassette.request(from_turn + 1)["messages"])
    if model is not None and model not in (project.config.get("models") or {}):
        known = ", ".join(sorted(project.config.get("models") or {})) or "none"
        raise LlamaherdError(
            f"--model {model}: no [models.{model}] in config.toml (models: {known})"
        )
    mode = "live" if live or model is not None else "update"
    overrides = Overrides(models=[model] if model else None, skill=skill)
    plan = Plan(mode, overrides, fork, found.cassette)
    case = as_case(found, tests_folder(found.agent) / "replay.toml")
    case.expect = {"state": run.state}  # the side-by-side is the point; no other check
    area = private_area(project, registry)
    try:
        result = run_case(project, registry, case, area, plan)
    finally:
        remove_area(area)
    calls = [
        {"agent": c["agent"], "context": "", "answered": True} for c in found.table.get("calls", [])
    ]
    original = case_run(run, store.events(run.id), calls=calls)
    done = Replayed(original, result, notes=list(found.notes))
    if result.run is not None and result.tape is not None:
        # Each side with its own run's id and working directory as placeholders: only what
        # the agent did differently shows.
        before = _normalised(original, found.substitutions)
        done.rows = side_by_side(before, _normalised(result.run, result.tape.substitutions))
    done.notes += _model_notes(result, fork, found.cassette)
    return done


def _normalised(run: CaseRun, substitutions: Any) -> CaseRun:
    fields = ("reason", "return_value", "texts", "tool_calls", "commands")
    return dataclasses.replace(run, **{f: substitutions.normalise(getattr(run, f)) for f in fields})


def _turns(first: int, last: int) -> str:
    return f"turn {first}" if first == last else f"turns {first}-{last}"


def _model_notes(result: CaseResult, fork: Fork | None, recorded: Any) -> list[str]:
    tape = result.tape
    if tape is None or not tape.sources:
        return [f.message for f in result.failures]
    played = tape.sources.count("cassette")
    notes = []
    if fork is not None:
        notes.append(
            f"{_turns(1, fork.turns)} from the recording; their tool calls ran again in a fresh "
            f"sandbox (after hooks.pre): {_restored(tape, recorded, fork.turns)}"
        )
    elif played:
        notes.append(f"{_turns(1, played)} answered from the recording (the requests matched)")
    if len(tape.sources) > played:
        notes.append(f"{_turns(played + 1, len(tape.sources))} asked the live model")
    return notes + [f"{f.where}: {f.message}" for f in result.failures if f.where != "expect.state"]


def _restored(tape: Any, recorded: Any, turns: int) -> str:
    """How many tool results of the first ``turns`` turns came out as recorded this time."""
    if len(tape.played.turns) <= turns:
        return "the run ended before the fork point"
    before = recorded.request(turns + 1)["messages"]
    now = tape.played.request(turns + 1)["messages"]
    pairs = [(a, b) for a, b in zip(before, now, strict=False) if a.get("role") == "tool"]
    same = sum(1 for a, b in pairs if a.get("content") == b.get("content"))
    text = f"{same} of {len(pairs)} tool results as recorded"
    changed = [b.get("tool_call_id") for a, b in pairs if a.get("content") != b.get("content")]
    return text + (f" (differing: {', '.join(map(str, changed))})" if changed else "")


# ------------------------------------------------------------------------------ side by side


def side_by_side(original: CaseRun, replayed: CaseRun) -> list[Row]:
    rows = [
        Row("state", _end(original), _end(replayed)),
        Row("return value", _json(original.return_value), _json(replayed.return_value)),
        Row("turns", str(original.turns), str(replayed.turns)),
        Row("tokens", _tokens(original), _tokens(replayed)),
        Row("cost", _cost(original), _cost(replayed)),
    ]
    for turn in range(1, max(original.turns, replayed.turns) + 1):
        rows.append(Row(f"turn {turn}", _turn(original, turn), _turn(replayed, turn)))
    rows += _aligned(
        "command",
        [_command(c) for c in original.commands],
        [_command(c) for c in replayed.commands],
    )
    return rows


def _aligned(what: str, before: list[str], after: list[str]) -> list[Row]:
    """Two sequences side by side, equal items on one row, the rest against a gap."""
    rows = []
    for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(
        None, before, after, autojunk=False
    ).get_opcodes():
        left, right = before[a0:a1], after[b0:b1]
        if tag == "equal":
            rows += [Row(what, item, item) for item in left]
            continue
        for index in range(max(len(left), len(right))):
            rows.append(
                Row(
                    what,
                    left[index] if index < len(left) else "-",
                    right[index] if index < len(right) else "-",
                )
            )
    return rows


def _end(run: CaseRun) -> str:
    return f"{run.state} (exit {run.exit_code})" + (
        f": {run.reason}" if run.reason and run.state != "done" else ""
    )


def _json(value: Any) -> str:
    return "-" if value is None else _short(json.dumps(value, ensure_ascii=False, default=str))


def _tokens(run: CaseRun) -> str:
    return f"{run.input_tokens + run.output_tokens:,} ({run.input_tokens:,} in, {run.output_tokens:,} out)"


def _cost(run: CaseRun) -> str:
    unpriced = f" (+{run.unpriced_turns} unpriced turns)" if run.unpriced_turns else ""
    return f"${run.cost_usd:.4f}{unpriced}"


def _turn(run: CaseRun, turn: int) -> str:
    calls = [c for c in run.tool_calls if c["turn"] == turn]
    if calls:
        return "; ".join(
            _short(f"{c['name']} {json.dumps(c['arguments'], ensure_ascii=False)}", 60)
            for c in calls
        )
    text = run.texts[turn - 1] if turn <= len(run.texts) else None
    return "-" if text is None else "text: " + _short(" ".join(text.split()))


def _command(command: dict[str, Any]) -> str:
    where = "bash" if command["phase"] == "bash" else f"hooks.{command['phase']}"
    code = command.get("exit_code")
    return _short(f"{where}: {command.get('command')}") + (
        "" if code is None else f" (exit {code})"
    )


def _short(text: str, limit: int = CELL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def replayed_dict(done: Replayed) -> dict[str, Any]:
    from llamaherd.agent_tests.report import result_dict

    result = result_dict(done.result, Path("/"))
    return {
        "original": done.original.run_id,
        "replay": result["run"],
        "model": result.get("model"),
        "rows": [
            {"what": r.what, "original": r.original, "replay": r.replay, "differs": r.differs}
            for r in done.rows
        ],
        "changed": sum(1 for r in done.rows if r.differs),
        "notes": done.notes,
    }

"""What ``al test`` says: a line per case as it ends, each failure with the run's lines, a
summary; the same as JSON (``--json``) and as JUnit XML (``--junit FILE``) for CI; with
``--repeat N``, the pass rate and spend of each case."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.agent_tests.execute import ERROR, FAILED, PASSED, CaseResult
from llamaherd.errors import ConfigError
from llamaherd.markup import escape

MARKS = {PASSED: "[green]PASSED[/]", FAILED: "[bold red]FAILED[/]", ERROR: "[bold red]ERROR[/] "}


@dataclass
class Report:
    """Everything one ``al test`` ran: results in the order cases were collected (each case
    ``repeat`` times), collection errors, wall time."""

    results: list[CaseResult] = field(default_factory=list)
    errors: list[ConfigError] = field(default_factory=list)
    duration: float = 0.0
    repeat: int = 1

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def exit_code(self) -> int:
        """As pytest's: 0 all passed, 1 a case failed, 2 a case file could not be read, 5
        nothing was collected."""
        if self.errors:
            return 2
        if not self.results:
            return 5
        return 0 if all(r.passed for r in self.results) else 1

    def by_case(self) -> dict[str, list[CaseResult]]:
        grouped: dict[str, list[CaseResult]] = {}
        for result in self.results:
            grouped.setdefault(result.case.id, []).append(result)
        return grouped


# ------------------------------------------------------------------------------ console


def line(result: CaseResult, index: int | None = None) -> str:
    """The console line of a case that just ended."""
    name = result.case.id + (f" [{index}]" if index is not None else "")
    notes = f"  ({'; '.join(result.notes)})" if result.notes else ""
    return f"{MARKS[result.outcome]} {escape(name)}  {result.duration:.1f} s{escape(notes)}"


def failure_lines(result: CaseResult, root: Path) -> list[str]:
    """A failed case in full (console markup): each failure with the run's lines."""
    where = _relative(result.case.path, root)
    lines = [f"[bold]=== {result.outcome.upper()} {escape(result.case.id)}[/] ({escape(where)})"]
    for failure in result.failures:
        lines.append(f"[red]{escape(failure.where)}[/]: {escape(failure.message)}")
        lines += [f"    {escape(detail)}" for detail in failure.details]
    run = result.run
    if run is not None:
        lines.append(escape(f"run {run.run_id}: {_run_summary(result)}"))
    return lines + [""]


def _run_summary(result: CaseResult) -> str:
    run = result.run
    assert run is not None
    end = f"{run.state} (exit {run.exit_code})" + (f": {run.reason}" if run.reason else "")
    tape = result.tape
    played = ""
    if tape is not None and tape.sources:
        cassette = tape.sources.count("cassette")
        played = f", {cassette} from the cassette, {len(tape.sources) - cassette} live"
    turns = f"{run.turns} turn" + ("" if run.turns == 1 else "s")
    return f"{end}; {turns}{played}; {run.input_tokens + run.output_tokens} tokens"


def summary(session: Report) -> str:
    parts = [f"{session.count(PASSED)} passed"]
    if session.count(FAILED):
        parts.append(f"[bold red]{session.count(FAILED)} failed[/]")
    if session.count(ERROR):
        parts.append(f"[bold red]{session.count(ERROR)} errors[/]")
    if session.errors:
        parts.append(f"[bold red]{len(session.errors)} case files not read[/]")
    return ", ".join(parts) + f" in {session.duration:.1f} s"


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------ --repeat


def repeat_rows(session: Report) -> list[dict[str, Any]]:
    """Per case: runs, passes, pass rate, turns, tokens and spend (the mean, and the total
    spend), and what failed."""
    rows = []
    for case_id, results in session.by_case().items():
        runs = [r.run for r in results if r.run is not None]
        tokens = [r.input_tokens + r.output_tokens for r in runs]
        costs = [r.cost_usd for r in runs]
        passed = sum(1 for r in results if r.passed)
        rows.append(
            {
                "id": case_id,
                "runs": len(results),
                "passed": passed,
                "pass_rate": passed / len(results),
                "turns": _mean([r.turns for r in runs]),
                "tokens": _mean(tokens),
                "cost_usd": _mean(costs),
                "total_cost_usd": round(sum(costs), 6),
                "unpriced_turns": sum(r.unpriced_turns for r in runs),
                "duration": _mean([r.duration for r in results]),
                "failures": sorted(
                    {f"{f.where}: {f.message}" for r in results for f in r.failures}
                ),
            }
        )
    return rows


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 6) if values else None


def repeat_table(rows: list[dict[str, Any]]) -> None:
    from llamaherd.tables import Column, print_table

    def number(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    print_table(
        [
            Column("CASE", keep=True),
            Column("PASSED", justify="right"),
            Column("RATE", justify="right"),
            Column("TURNS", justify="right"),
            Column("TOKENS", justify="right"),
            Column("COST/RUN", justify="right"),
            Column("COST", justify="right"),
            Column("TIME/RUN", justify="right"),
        ],
        [
            (
                escape(row["id"]),
                f"{row['passed']}/{row['runs']}",
                f"{row['pass_rate']:.0%}",
                number(row["turns"], ".1f"),
                number(row["tokens"], ",.0f"),
                "-"
                if row["cost_usd"] is None
                else f"${row['cost_usd']:.4f}" + ("*" if row["unpriced_turns"] else ""),
                f"${row['total_cost_usd']:.4f}",
                number(row["duration"], ".1f") + " s",
            )
            for row in rows
        ],
    )


# ------------------------------------------------------------------------------ JSON, JUnit


def result_dict(result: CaseResult, root: Path) -> dict[str, Any]:
    run, tape = result.run, result.tape
    found: dict[str, Any] = {
        "id": result.case.id,
        "agent": result.case.agent,
        "case": result.case.name,
        "file": _relative(result.case.path, root),
        "outcome": result.outcome,
        "duration": round(result.duration, 3),
        "failures": [
            {"where": f.where, "message": f.message, "details": f.details} for f in result.failures
        ],
        "notes": result.notes,
        "run": None,
    }
    if run is not None:
        found["run"] = {
            "id": run.run_id,
            "state": run.state,
            "exit_code": run.exit_code,
            "reason": run.reason,
            "return_value": run.return_value,
            "turns": run.turns,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "cost_usd": run.cost_usd,
            "unpriced_turns": run.unpriced_turns,
        }
    if tape is not None:
        found["model"] = {"mode": tape.mode, "turns": tape.sources}
    return found


def session_dict(session: Report, root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {
        "passed": session.count(PASSED),
        "failed": session.count(FAILED),
        "errors": session.count(ERROR),
        "collection_errors": [str(e) for e in session.errors],
        "duration": round(session.duration, 3),
        "exit_code": session.exit_code,
        "cases": [result_dict(r, root) for r in session.results],
    }
    if session.repeat > 1:
        found["repeat"] = repeat_rows(session)
    return found


def junit(session: Report, root: Path) -> str:
    """JUnit XML: a testsuite per agent, a testcase per case run, a <failure> per failed case
    (an <error> for one that could not run, and for a case file that could not be read)."""
    import xml.etree.ElementTree as ET

    suites = ET.Element("testsuites", name="al test", time=f"{session.duration:.3f}")
    by_agent: dict[str, list[CaseResult]] = {}
    for result in session.results:
        by_agent.setdefault(result.case.agent, []).append(result)
    counts = {"tests": 0, "failures": 0, "errors": 0}
    for agent, results in by_agent.items():
        suite = ET.SubElement(suites, "testsuite", name=agent)
        seen: dict[str, int] = {}
        for result in results:
            seen[result.case.name] = seen.get(result.case.name, 0) + 1
            name = result.case.name + (f"[{seen[result.case.name]}]" if session.repeat > 1 else "")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=agent,
                name=name,
                file=_relative(result.case.path, root),
                time=f"{result.duration:.3f}",
            )
            if result.outcome != PASSED:
                tag = "failure" if result.outcome == FAILED else "error"
                first = result.failures[0] if result.failures else None
                message = f"{first.where}: {first.message}" if first else result.outcome
                text = "\n".join(
                    f"{f.where}: {f.message}" + "".join(f"\n    {d}" for d in f.details)
                    for f in result.failures
                )
                ET.SubElement(case, tag, message=message).text = text
        _count(suite, results)
        for key in counts:
            counts[key] += int(suite.get(key, "0"))
    if session.errors:
        suite = ET.SubElement(
            suites, "testsuite", name="collection", tests=str(len(session.errors))
        )
        suite.set("errors", str(len(session.errors)))
        for error in session.errors:
            case = ET.SubElement(
                suite, "testcase", classname="collection", name=_relative(Path(error.file), root)
            )
            ET.SubElement(case, "error", message=str(error)).text = str(error)
        counts["tests"] += len(session.errors)
        counts["errors"] += len(session.errors)
    for key, value in counts.items():
        suites.set(key, str(value))
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def _count(suite: Any, results: list[CaseResult]) -> None:
    suite.set("tests", str(len(results)))
    suite.set("failures", str(sum(1 for r in results if r.outcome == FAILED)))
    suite.set("errors", str(sum(1 for r in results if r.outcome == ERROR)))
    suite.set("time", f"{sum(r.duration for r in results):.3f}")


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)

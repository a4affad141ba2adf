"""Core's expectations of a test case (the keys of ``[expect]``), registered through
``register_expectations`` as a plugin's would be, and the matching rules they share.

A value matches an expectation as follows: a table matches a table whose keys it has, each
matching (keys it does not name may be there too); an array matches an array of the same
length, item by item; a string, number or boolean is equal; and a table with one key of
``regex``, ``glob`` or ``contains`` matches a string that the regular expression is found in,
the glob matches whole, or that contains the text.

Lists of expectations (``commands``, ``tool_calls``, ``calls``, ``waits``, ``transitions``) are
met in order: each entry by something the run did after what met the entry before it (other
things may happen in between). ``no_commands`` and ``no_tool_calls`` entries must match
nothing the run did.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llamaherd import hookimpl
from llamaherd.types import CaseRun, Unmet

MATCHER_KEYS = ("regex", "glob", "contains")
TEXT_MATCHER = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "additionalProperties": False,
            "properties": {key: {"type": "string"} for key in MATCHER_KEYS},
        },
    ]
}
SHOWN = 20  # lines of the run shown under a failure


# ------------------------------------------------------------------------------ matching


def is_matcher(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in MATCHER_KEYS


def matches(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` (a JSON value) meets ``expected`` (see the module docstring)."""
    if is_matcher(expected):
        if not isinstance(actual, str):
            return False
        ((kind, pattern),) = expected.items()
        if kind == "regex":
            return re.search(pattern, actual) is not None
        if kind == "glob":
            return fnmatch.fnmatchcase(actual, pattern)
        return pattern in actual
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return expected == actual


def shown(value: Any) -> str:
    """A value as a failure message writes it."""
    if is_matcher(value):
        ((kind, pattern),) = value.items()
        return f"{kind} {json.dumps(pattern)}"
    return json.dumps(value, ensure_ascii=False, default=str)


def _text_of(expected: Any) -> str:
    """The text an expectation looks for, to find the closest thing the run did."""
    if is_matcher(expected):
        return str(next(iter(expected.values())))
    return expected if isinstance(expected, str) else shown(expected)


def closest(wanted: str, candidates: Sequence[str]) -> list[str]:
    """The candidate most like ``wanted``, as a two-line diff (nothing when none is close)."""
    if not candidates:
        return []
    ratio = [difflib.SequenceMatcher(None, wanted, c).ratio() for c in candidates]
    best = max(range(len(candidates)), key=ratio.__getitem__)
    if ratio[best] < 0.4:
        return []
    return ["closest:", f"  - {wanted}", f"  + {candidates[best]}"]


def _limited(lines: list[str]) -> list[str]:
    if len(lines) <= SHOWN:
        return lines
    return [*lines[:SHOWN], f"... and {len(lines) - SHOWN} more"]


def _primary(entry: dict[str, Any]) -> str | None:
    """The key of an entry the closest candidate is looked for by."""
    return next((k for k in ("command", "name", "agent", "filter", "state") if k in entry), None)


# ------------------------------------------------------------------------------ the kinds


class _Expectation:
    name = ""
    description = ""
    schema: dict[str, Any] = {}


class Equals(_Expectation):
    """A value of the run that must match (``state``, ``exit_code``, ``return``...)."""

    def __init__(
        self, name: str, description: str, schema: dict[str, Any], read: Callable[[CaseRun], Any]
    ):
        self.name, self.description, self.schema, self.read = name, description, schema, read

    def check(self, expected: Any, run: CaseRun) -> list[Unmet]:
        actual = self.read(run)
        if matches(expected, actual):
            return []
        details = [
            f"the run: {run.state} (exit {run.exit_code})"
            + (f": {run.reason}" if run.reason else "")
        ]
        return [Unmet(f"expected {shown(expected)}, got {shown(actual)}", details)]


class AtMost(_Expectation):
    """A count or an amount of the run that must not exceed the case's (``max_turns``...)."""

    def __init__(self, name: str, description: str, integer: bool, read: Callable[[CaseRun], Any]):
        kind = "integer" if integer else "number"
        self.name, self.description, self.read = name, description, read
        self.schema = {"type": kind, "minimum": 0}

    def check(self, expected: Any, run: CaseRun) -> list[Unmet]:
        actual, note = self.read(run)
        if note:
            return [Unmet(note)]
        if actual <= expected:
            return []
        return [Unmet(f"expected at most {expected:g}, the run took {actual:g}", _spend(run))]


def _spend(run: CaseRun) -> list[str]:
    cost = f"${run.cost_usd:.4f}" + (
        f" (+{run.unpriced_turns} turns unpriced)" if run.unpriced_turns else ""
    )
    return [
        f"turns {run.turns}; tokens {run.input_tokens} in, {run.output_tokens} out; cost {cost}"
    ]


def _cost(run: CaseRun) -> tuple[float, str | None]:
    if run.unpriced_turns:
        return run.cost_usd, (
            f"the price of {run.unpriced_turns} turn(s) is unknown: set `pricing` in the model's "
            "[models.<name>] table to check spend in USD"
        )
    return run.cost_usd, None


def _entry(properties: dict[str, Any], required: Iterable[str]) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": list(required),
            "properties": {**properties, "count": {"type": "integer", "minimum": 0}},
        },
    }


class Listed(_Expectation):
    """A list of things the run must have done, in order (or, ``forbid``, must not have)."""

    def __init__(
        self,
        name: str,
        description: str,
        properties: dict[str, Any],
        required: Sequence[str],
        what: str,
        read: Callable[[CaseRun], list[dict[str, Any]]],
        listing: Callable[[dict[str, Any]], str],
        forbid: bool = False,
        shorthand: str | None = None,
    ):
        self.name, self.description, self.what = name, description, what
        self.schema = _entry(properties, required)
        if shorthand is not None:  # an entry may be just the value of this key
            self.schema["items"] = {"anyOf": [{"type": "string"}, self.schema["items"]]}
        self.read, self.listing, self.forbid = read, listing, forbid
        self.shorthand = shorthand

    def check(self, expected: Any, run: CaseRun) -> list[Unmet]:
        done = self.read(run)
        if self.shorthand is not None:
            expected = [{self.shorthand: e} if isinstance(e, str) else e for e in expected]
        return self._none_of(expected, done) if self.forbid else self._in_order(expected, done)

    def _in_order(self, entries: list[dict[str, Any]], done: list[dict[str, Any]]) -> list[Unmet]:
        """Each entry met by an item of ``done`` after the previous entry's (``count`` in an
        entry: exactly that many items meet it, anywhere)."""
        what, meets = self.what, _meets
        unmet: list[Unmet] = []
        start = 0
        listed = _limited([f"  {self.listing(d)}" for d in done]) or ["  (none)"]
        lines = [f"{what} the run did:", *listed]
        for index, entry in enumerate(entries):
            if "count" in entry:
                found = sum(1 for item in done if meets(entry, item))
                if found != entry["count"]:
                    message = (
                        f"expected {entry['count']} {what} like {_describe(entry)}, found {found}"
                    )
                    unmet.append(Unmet(message, lines, index))
                continue
            hit = next((i for i in range(start, len(done)) if meets(entry, done[i])), None)
            if hit is not None:
                start = hit + 1
                continue
            earlier = any(meets(entry, item) for item in done[:start])
            message = f"no {what[:-1]} like {_describe(entry)}" + (
                " after the one before it (it came earlier)" if earlier else ""
            )
            key = _primary(entry)
            near = (
                closest(_text_of(entry[key]), [_text_of(d.get(key)) for d in done]) if key else []
            )
            unmet.append(Unmet(message, [*near, *lines], index))
        return unmet

    def _none_of(self, entries: list[dict[str, Any]], done: list[dict[str, Any]]) -> list[Unmet]:
        unmet = []
        for index, entry in enumerate(entries):
            hits = [self.listing(d) for d in done if _meets(entry, d)]
            if hits:
                message = f"expected no {self.what[:-1]} like {_describe(entry)}, found {len(hits)}"
                unmet.append(Unmet(message, hits, index))
        return unmet


def _describe(entry: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {shown(v)}" for k, v in entry.items() if k != "count") + "}"


def _meets(entry: dict[str, Any], item: dict[str, Any]) -> bool:
    """An entry meets an item when each key it gives matches the item's field."""
    return all(matches(value, item.get(key)) for key, value in entry.items() if key != "count")


def _command_line(item: dict[str, Any]) -> str:
    where = {"pre": "hooks.pre ", "post": "hooks.post", "bash": "bash      "}[item["phase"]]
    code = item.get("exit_code")
    return f"{where} {item['command']}" + ("" if code is None else f"  (exit {code})")


def _tool_line(item: dict[str, Any]) -> str:
    error = " [error]" if item.get("is_error") else ""
    return f"turn {item['turn']}: {item['name']} {shown(item['arguments'])}{error}"


def _call_line(item: dict[str, Any]) -> str:
    answered = "" if item.get("answered") else " [not answered by the case]"
    return f"{item['agent']}: {shown(item['context'])}{answered}"


def _file_check(entry: dict[str, Any], run: CaseRun) -> str | None:
    """Why one ``[[expect.files]]`` entry is not met, or None."""
    data = run.files.get(str(entry["path"]))
    if not entry.get("exists", True):
        return None if data is None else "expected it not to exist; it does"
    if data is None:
        return "expected it to exist; it does not"
    text = data.decode("utf-8", "replace")
    if "equals" in entry and text != entry["equals"]:
        return "its content differs:\n" + "\n".join(
            difflib.unified_diff(
                entry["equals"].splitlines(), text.splitlines(), "expected", "written", lineterm=""
            )
        )
    if "content" in entry and not matches(entry["content"], text):
        return f"its content does not match {shown(entry['content'])}"
    if "json" in entry:
        try:
            value = json.loads(text)
        except ValueError:
            return "it is not JSON"
        if not matches(entry["json"], value):
            return f"its JSON {shown(value)} does not match {shown(entry['json'])}"
    return None


class Files(_Expectation):
    name = "files"
    description = (
        "Files in the sandbox when the run ends: [[expect.files]] path (relative to the working "
        "directory), exists (default true), content (a matcher), equals (the whole text), json."
    )
    schema = {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["path"],
            "additionalProperties": False,
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "exists": {"type": "boolean"},
                "content": TEXT_MATCHER,
                "equals": {"type": "string"},
                "json": {},
            },
        },
    }

    def check(self, expected: Any, run: CaseRun) -> list[Unmet]:
        unmet = []
        for index, entry in enumerate(expected):
            why = _file_check(entry, run)
            if why is not None:
                first, *rest = why.split("\n")
                unmet.append(Unmet(f"{entry['path']}: {first}", rest[:SHOWN], index))
        return unmet


def _model_texts(run: CaseRun) -> str:
    return "\n\n".join(text for text in run.texts if text.strip())


def _last_status(run: CaseRun) -> Any:
    return run.status


_COMMAND = {
    "command": TEXT_MATCHER,
    "phase": {"enum": ["pre", "post", "bash"]},
    "exit_code": {"type": "integer"},
    "output": TEXT_MATCHER,
}
_TOOL = {
    "name": {"type": "string"},
    "arguments": {"type": "object"},
    "result": TEXT_MATCHER,
    "is_error": {"type": "boolean"},
}
_ANY: dict[str, Any] = {}


def _both(
    name: str,
    description: str,
    properties: dict[str, Any],
    read: Callable[[CaseRun], list[dict[str, Any]]],
    listing: Callable[[dict[str, Any]], str],
) -> list[Listed]:
    """``name`` (these, in order) and ``no_<name>`` (none like these), of one list of the run."""
    what, required = name.replace("_", " "), [next(iter(properties))]
    forbid = f"{what.capitalize()} the run must not have: none may match these."
    return [
        Listed(name, description, properties, required, what, read, listing),
        Listed(f"no_{name}", forbid, properties, required, what, read, listing, forbid=True),
    ]


CORE: list[Any] = [
    Equals(
        "state",
        "The run's final state: done, error, timeout, killed.",
        {"enum": ["done", "error", "timeout", "killed"]},
        lambda r: r.state,
    ),
    Equals(
        "exit_code",
        "The run's exit code (0 done, 1 error, 3 budget, 124 timeout, 137 killed).",
        {"type": "integer"},
        lambda r: r.exit_code,
    ),
    Equals("reason", "Why the run ended (a text matcher).", TEXT_MATCHER, lambda r: r.reason),
    Equals(
        "return",
        "The run's return value (return_value / al-return): a JSON match.",
        _ANY,
        lambda r: r.return_value,
    ),
    Equals(
        "status",
        "The run's last status (set_status / al-status): a text matcher.",
        TEXT_MATCHER,
        _last_status,
    ),
    Equals(
        "text",
        "What the model wrote, every turn's text joined: a text matcher.",
        TEXT_MATCHER,
        _model_texts,
    ),
    AtMost("max_turns", "Model turns at most.", True, lambda r: (r.turns, None)),
    AtMost(
        "max_tokens",
        "Tokens (input and output) at most.",
        True,
        lambda r: (r.input_tokens + r.output_tokens, None),
    ),
    AtMost("max_cost_usd", "Spend in USD at most (every turn must be priced).", False, _cost),
    *_both(
        "commands",
        "Commands the run ran, in order: hooks and the model's bash calls (command, phase, "
        "exit_code, output; count: exactly that many).",
        _COMMAND,
        lambda r: r.commands,
        _command_line,
    ),
    *_both(
        "tool_calls",
        "Tool calls the model made, in order (name, arguments: a JSON match, result, is_error).",
        _TOOL,
        lambda r: r.tool_calls,
        _tool_line,
    ),
    Listed(
        "calls",
        "Calls to other agents, in order (agent, context).",
        {"agent": {"type": "string"}, "context": TEXT_MATCHER},
        ["agent"],
        "calls",
        lambda r: r.calls,
        _call_line,
    ),
    Listed(
        "waits",
        "wait_for_trigger calls, in order (filter: a JSON match, timeout).",
        {"filter": {"type": "object"}, "timeout": {}},
        ["filter"],
        "waits",
        lambda r: r.waits,
        lambda w: f"{shown(w['filter'])} (timeout {w.get('timeout')})",
    ),
    Listed(
        "transitions",
        'The run\'s states, in order: ["running", "waiting", "running", "done"].',
        {"state": {"type": "string"}},
        ["state"],
        "transitions",
        lambda r: [{"state": s} for s in r.transitions],
        lambda t: t["state"],
        shorthand="state",
    ),
    Files(),
]


@hookimpl
def register_expectations(register: Callable[[Any], None]) -> None:
    for expectation in CORE:
        register(expectation)

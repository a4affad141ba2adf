"""A test case from a stored run (``al record RUN``, and ``al replay RUN`` in memory).

The run's store row holds everything needed: its trigger, its transcript (checkpointed after
every turn, redacted), its events (the hooks and commands it ran, each model call with its
tokens), its calls. From them:

- the ``[trigger]`` its trigger type writes back (``case_trigger``), checked by building the
  event again (``case_event``); when that does not give the run's event, the payload verbatim;
- the cassette: each turn's request rebuilt from the transcript (the system prompt, the
  messages before the turn's reply, the tools the installed plugins offer) and its reply, with
  the tokens of its model call; normalised (``{{al.workdir}}``, ``{{al.run_id}}``);
- ``[credentials]``: the non-secret fields of the agent's credentials (a git username appears
  in the prompt); secret ones get test values;
- ``[[calls]]`` (what each callee returned), ``[[events]]`` (what resumed each
  ``wait_for_trigger``), ``replies`` (what a human answered);
- ``[expect]`` proposed from what the run did, for the user to edit: its state, return value,
  commands, tool calls, calls, waits and turns. A value holding the run's working directory or
  id becomes a glob, since a test run has its own.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.agent_tests.cases import CASSETTE_SUFFIX, TESTS_FOLDER, Case
from llamaherd.agent_tests.cassette import (
    Cassette,
    Substitutions,
    model_dict,
    now_iso,
    tool_dicts,
)
from llamaherd.agent_tests.fence import CallAnswer
from llamaherd.errors import CommandFailed, Conflict, LlamaherdError
from llamaherd.project import Agent, Project
from llamaherd.store import FINAL_STATES
from llamaherd.types import ModelConfig

WORKDIR = re.compile(r"^Working directory: (.+)$", re.MULTILINE)
GLOB_SPECIAL = re.compile(r"([*?\[])")
# Tools whose calls are proposed as [[expect.tool_calls]]: bash is proposed as commands.
NOT_PROPOSED = {"bash"}


@dataclass
class Recorded:
    """A case made from a run, not yet written: its parts and the files it needs."""

    agent: Agent
    run_id: str
    table: dict[str, Any]  # the case file's TOML document
    cassette: Cassette
    payloads: dict[str, Any] = field(default_factory=dict)  # file name -> JSON value
    notes: list[str] = field(default_factory=list)
    substitutions: Substitutions = field(default_factory=Substitutions)  # the run's values


def find_finished(store: Any, target: str) -> Any:
    run = store.find_run(target)
    if run is None:
        raise LlamaherdError(f"no such run {target!r} (see `al runs`)")
    if run.state not in FINAL_STATES:
        raise Conflict(f"run {run.id} is {run.state}: record or replay it once it has ended")
    return run


def from_run(project: Project, registry: Any, store: Any, run: Any, name: str) -> Recorded:
    """The case ``name`` of ``run`` (a finished run of ``project``'s store)."""
    agent = project.agent(run.agent)
    events = store.events(run.id)
    transcript = run.transcript or []
    messages = [m for m in transcript if m.get("role") != "meta"]
    substitutions = Substitutions({"workdir": _workdir(messages), "run_id": run.id})
    cassette = _cassette(project, registry, agent, run, messages, events, substitutions)
    found = Recorded(agent, run.id, {}, cassette, substitutions=substitutions)
    trigger = _trigger(found, registry, run, name)
    table: dict[str, Any] = {
        "description": f"recorded from run {run.id} ({run.trigger_kind}, {run.state})",
        "trigger": trigger,
    }
    credentials = _credentials(agent, registry)
    if credentials:
        table["credentials"] = credentials
    calls = _calls(store, run.id)
    if calls:
        table["calls"] = calls
    waits = _wait_events(found, registry, messages, name)
    if waits:
        table["events"] = waits
    replies = [_reply(e["data"]) for e in events if e["type"] == "human" and _reply(e["data"])]
    if replies:
        table["replies"] = replies
    table["expect"] = _proposed(run, messages, events, calls, substitutions)
    found.table = table
    return found


def as_case(found: Recorded, path: Path) -> Case:
    """The recorded case as ``al test`` would read it from ``path`` (``al replay``)."""
    table = found.table
    return Case(
        path=path,
        agent=found.agent.name,
        trigger=_inlined(found, table["trigger"]),
        description=table["description"],
        events=[_inlined(found, e) for e in table.get("events", [])],
        cassette=path.with_name(path.stem + CASSETTE_SUFFIX),
        credentials={_ref(k): v for k, v in table.get("credentials", {}).items()},
        calls=[
            CallAnswer(c["agent"], c.get("return"), c.get("error")) for c in table.get("calls", [])
        ],
        replies=list(table.get("replies", [])),
        expect=dict(table["expect"]),
    )


def _inlined(found: Recorded, spec: dict[str, Any]) -> dict[str, Any]:
    return {k: found.payloads.get(v, v) if isinstance(v, str) else v for k, v in spec.items()}


def _ref(key: str) -> tuple[str, str]:
    from llamaherd.credentials import parse_ref

    return parse_ref(key)


# ------------------------------------------------------------------------------ the cassette


def _workdir(messages: list[dict[str, Any]]) -> str:
    first = next((m for m in messages if m.get("role") == "user"), None)
    found = WORKDIR.search(str(first.get("content") or "")) if first else None
    return found.group(1).strip() if found else ""


def _cassette(
    project: Project,
    registry: Any,
    agent: Agent,
    run: Any,
    messages: list[dict[str, Any]],
    events: list[dict[str, Any]],
    substitutions: Substitutions,
) -> Cassette:
    from llamaherd.session import offered_tools, skill_tools

    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    conversation = [m for m in messages if m.get("role") != "system"]
    tools = tool_dicts(offered_tools(skill_tools(registry)))
    calls = [e["data"] for e in events if e["type"] == "model_call" and e["data"].get("ok")]
    cassette = Cassette(agent.name, recorded={"from": f"run {run.id}", "at": now_iso()})
    turn = 0
    for index, message in enumerate(conversation):
        if message.get("role") != "assistant":
            continue
        call = calls[turn] if turn < len(calls) else {}
        turn += 1
        request = {"system": system, "tools": tools, "messages": conversation[:index]}
        reply = {
            "text": message.get("content") or "",
            "tool_calls": message.get("tool_calls") or [],
            "stop_reason": "tool_use" if message.get("tool_calls") else "end_turn",
            "usage": {
                "input_tokens": int(call.get("input_tokens") or 0),
                "output_tokens": int(call.get("output_tokens") or 0),
                "cached_input_tokens": int(call.get("cached_input_tokens") or 0),
                "cache_write_tokens": 0,
            },
        }
        if message.get("provider_data"):
            reply["provider_data"] = message["provider_data"]
        model = _model(project, call)
        cassette.add(substitutions.normalise(request), model, substitutions.normalise(reply))
    return cassette


def _model(project: Project, call: dict[str, Any]) -> dict[str, Any]:
    """Who answered a model call (its event names the [models.<name>] table)."""
    name = str(call.get("model") or "")
    table = (project.config.get("models") or {}).get(name) or {}
    provider = str(call.get("provider") or table.get("provider") or "")
    return model_dict(ModelConfig(name=name, provider=provider, model=str(table.get("model", ""))))


# ------------------------------------------------------------------------------ the case


def _trigger(found: Recorded, registry: Any, run: Any, name: str) -> dict[str, Any]:
    """The case's [trigger]: what the run's trigger type writes back, when building it again
    gives the run's event; else the run's payload verbatim."""
    from llamaherd.agent_tests.execute import case_event
    from llamaherd.triggers import for_kind, verbatim

    stored = run.trigger or {}
    trigger_type = for_kind(registry, run.trigger_kind)
    write = getattr(trigger_type, "case_trigger", None)
    spec = write(stored) if write is not None else verbatim(stored)
    try:
        event = case_event(spec, found.agent, registry)
        same = (event.payload, event.prompt or "", event.source) == (
            stored.get("payload") or {},
            stored.get("prompt") or "",
            stored.get("source"),
        )
    except LlamaherdError as exc:
        same, why = False, str(exc)
    else:
        why = "its trigger type builds another event from it"
    if not same and "event_payload" not in spec:
        found.notes.append(f"the trigger is kept verbatim ({why})")
        spec = verbatim(stored)
    return _payload_file(found, spec, f"{name}.payload.json")


def _payload_file(found: Recorded, spec: dict[str, Any], file: str) -> dict[str, Any]:
    """A webhook's body (or a verbatim payload) goes to a file beside the case."""
    for key in ("payload", "event_payload"):
        value = spec.get(key)
        if isinstance(value, dict | list) and (
            spec.get("kind") == "webhook" or key == "event_payload"
        ):
            found.payloads[file] = value
            spec = {**spec, key: file}
    return spec


def _credentials(agent: Agent, registry: Any) -> dict[str, dict[str, str]]:
    """The non-secret fields of the agent's staged credentials, as stored now."""
    from llamaherd.credentials import CredentialStore, format_ref, is_staged, parse_ref

    store, found = CredentialStore(), {}
    for ref in agent.credentials:
        type_name, instance = parse_ref(ref)
        kind = registry.credential_types.get(type_name)
        if kind is None or not is_staged(kind):
            continue
        plain = {f.name for f in kind.fields if not f.secret}
        values = {k: v for k, v in (store.read(type_name, instance) or {}).items() if k in plain}
        if values:
            found[format_ref(type_name, instance)] = values
    return found


def _calls(store: Any, run_id: str) -> list[dict[str, Any]]:
    """What each call the run made came back with (its callee's return value or error)."""
    answers = []
    for call_id in store.call_ids(run_id):
        call = store.get_call(call_id) or {}
        answer: dict[str, Any] = {"agent": call.get("target")}
        if call.get("state") == "done" and call.get("return_value") is not None:
            answer["return"] = call["return_value"]
        elif call.get("state") != "done":
            answer["error"] = str(call.get("error") or f"the call was {call.get('state')}")
        answers.append(answer)
    return answers


def _wait_events(
    found: Recorded, registry: Any, messages: list[dict[str, Any]], name: str
) -> list[dict[str, Any]]:
    """The event that resumed each ``wait_for_trigger`` (one that timed out: none)."""
    from llamaherd.triggers import for_kind, verbatim

    results = {m.get("tool_call_id"): m for m in messages if m.get("role") == "tool"}
    specs = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call.get("name") != "wait_for_trigger":
                continue
            answer = results.get(call.get("id")) or {}
            try:
                event = json.loads(str(answer.get("content") or ""))
            except ValueError:
                continue
            if answer.get("is_error") or not isinstance(event, dict) or "kind" not in event:
                continue
            trigger = {
                "kind": event["kind"],
                "payload": event.get("payload") or {},
                "source": event.get("source"),
            }
            write = getattr(for_kind(registry, str(event["kind"])), "case_trigger", None)
            spec = write(trigger) if write is not None else verbatim(trigger)
            specs.append(_payload_file(found, spec, f"{name}.event-{len(specs) + 1}.json"))
    return specs


def _reply(data: dict[str, Any]) -> str:
    return str(data.get("message") or data.get("answer") or "")


def _proposed(
    run: Any,
    messages: list[dict[str, Any]],
    events: list[dict[str, Any]],
    calls: list[dict[str, Any]],
    substitutions: Substitutions,
) -> dict[str, Any]:
    from llamaherd.agent_tests.execute import commands_of, conversation_of
    from llamaherd.store import EXIT_CODES

    stable = _Stable(substitutions)
    expect: dict[str, Any] = {"state": run.state}
    if run.exit_code != EXIT_CODES.get(run.state):
        expect["exit_code"] = run.exit_code
    if run.return_value is not None:
        expect["return"] = stable(run.return_value)
    tool_calls, _ = conversation_of(messages)
    turns = sum(1 for m in messages if m.get("role") == "assistant")
    if turns:
        expect["max_turns"] = turns
    commands = [
        {"command": stable(c["command"]), "phase": c["phase"], **_code(c)}
        for c in commands_of(events)
        if isinstance(c.get("command"), str)
    ]
    if commands:
        expect["commands"] = commands
    proposed = [
        {"name": c["name"], "arguments": stable(c["arguments"])}
        for c in tool_calls
        if c["name"] not in NOT_PROPOSED
    ]
    if proposed:
        expect["tool_calls"] = proposed
    if calls:
        expect["calls"] = [{"agent": c["agent"]} for c in calls]
    waits = [
        {"filter": stable(e["data"].get("filter") or {})} for e in events if e["type"] == "wait"
    ]
    if waits:
        expect["waits"] = waits
    return expect


def _code(command: dict[str, Any]) -> dict[str, Any]:
    return {} if command.get("exit_code") is None else {"exit_code": command["exit_code"]}


class _Stable:
    """A value as an expectation of it: a string holding the run's working directory or id
    becomes a glob matching any run's."""

    def __init__(self, substitutions: Substitutions):
        self.values = [v for v in substitutions.values.values() if v]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list):
            return [self(item) for item in value]
        if isinstance(value, dict):
            return {key: self(item) for key, item in value.items()}
        return value

    def _text(self, text: str) -> Any:
        if not any(v in text for v in self.values):
            return text
        pattern = GLOB_SPECIAL.sub(r"[\1]", text)
        for value in sorted(self.values, key=len, reverse=True):
            pattern = pattern.replace(GLOB_SPECIAL.sub(r"[\1]", value), "*")
        assert fnmatch.fnmatchcase(text, pattern)
        return {"glob": pattern}


# ------------------------------------------------------------------------------ writing


def write_case(found: Recorded, folder: Path, name: str, force: bool) -> list[Path]:
    """Write the case, its cassette and its payload files into ``folder``; refuses to replace
    files unless ``force``. Returns the paths written."""
    import tomlkit

    case = folder / f"{name}.toml"
    cassette = folder / f"{name}{CASSETTE_SUFFIX}"
    payloads = {folder / file: value for file, value in found.payloads.items()}
    taken = [p for p in (case, cassette, *payloads) if p.exists()]
    if taken and not force:
        raise CommandFailed(
            f"{', '.join(str(p) for p in taken)} exist(s) already: choose another --name, or "
            "--force to replace"
        )
    folder.mkdir(parents=True, exist_ok=True)
    document = tomlkit.document()
    document.add(
        tomlkit.comment(
            f"Recorded by `al record {found.run_id}`: edit [expect] to say what must stay true."
        )
    )
    for key, value in found.table.items():
        document[key] = _toml(value, top=True)
    for path, value in payloads.items():
        path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    found.cassette.save(cassette)
    case.write_text(tomlkit.dumps(document), encoding="utf-8")
    return [case, cassette, *payloads]


def _toml(value: Any, top: bool = False, depth: int = 0) -> Any:
    """A value as TOML writes it readably: tables of a section are inline below its entries."""
    import tomlkit

    if isinstance(value, dict):  # TOML has no null: a key whose value is null is left out
        table = tomlkit.table() if top else tomlkit.inline_table()
        for key, item in value.items():
            if item is not None:
                table[key] = _toml(item, depth=depth + 1)
        return table
    if isinstance(value, list):
        items = [item for item in value if item is not None]
        if items and all(isinstance(v, dict) for v in items) and depth <= 1:
            tables = tomlkit.aot()
            for item in items:
                tables.append(_toml(item, top=True, depth=depth + 1))
            return tables
        array = tomlkit.array()
        array.extend(_toml(item, depth=depth + 1) for item in items)
        return array
    return value


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def record_run(
    project: Project,
    registry: Any,
    store: Any,
    target: str,
    name: str | None = None,
    force: bool = False,
) -> tuple[list[Path], list[str]]:
    """``al record``: write the case of finished run ``target`` (id or prefix) as
    ``agents/<agent>/tests/<name>.toml`` with its cassette and payload files; the paths written
    and notes on how it was made."""
    run = find_finished(store, target)
    name = name or default_name(run)
    if not NAME.fullmatch(name):
        raise LlamaherdError(
            f"--name {name!r}: expected letters, digits, '-' and '_' (a file name)"
        )
    found = from_run(project, registry, store, run, name)
    return write_case(found, tests_folder(found.agent), name, force), found.notes


def default_name(run: Any) -> str:
    return "run-" + run.id.removeprefix(f"{run.agent}-")


def tests_folder(agent: Agent) -> Path:
    return agent.path / TESTS_FOLDER

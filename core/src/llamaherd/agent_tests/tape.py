"""The tape: one test run's model side, at the provider contract.

``Tape.wrap(registry)`` is the registry with every provider wrapped (``TapedProvider``), so
whatever provider the agent's models resolve to (anthropic, openai-compatible, google, scripted,
a third party's) takes part without knowing it: each ``complete(messages, tools, model,
options)`` of the run goes through the tape, which answers it from the cassette or passes it to
the real provider, and records the turn either way.

Modes:

- ``replay``: every turn answered from the cassette while the request matches the recording;
  the first that does not ends the run with the difference (``Fatal``), and no connection to a
  model is ever opened;
- ``update``: as ``replay`` while the requests match, then the live model from the first turn
  that differs (or past the recording's end); what was played and asked is the new cassette;
- ``live``: the live model for every turn (``--live``, ``model = "live"``);
- a ``Fork`` (``al replay --from-turn N``): turns 1..N answered from the recorded run in order,
  whatever their tool results were this time (their tool calls run again in the fresh sandbox,
  which restores its files, working directory and ``setenv`` values), then the live model,
  shown the recorded conversation up to turn N (the checkpoint) and what followed it here.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llamaherd.agent_tests.cassette import (
    Cassette,
    Substitutions,
    difference,
    model_dict,
    reply_dict,
    reply_of,
    tool_dicts,
)
from llamaherd.errors import AuthError, Fatal
from llamaherd.types import Message, Reply, ToolSpec

MODES = ("replay", "update", "live")
PLAYED, ASKED = "cassette", "live"


class CassetteMismatch(Fatal):
    """A request of the run differs from the recording (replay mode): the run ends here."""


@dataclass
class Fork:
    """``al replay --from-turn N``: answer turns 1..``turns`` from the recorded run, then ask
    the live model, showing it ``checkpoint`` (the run's stored messages up to the end of turn
    ``turns``, normalised, the system prompt left out) instead of this run's own first turns."""

    turns: int
    checkpoint: list[dict[str, Any]]


@dataclass
class Tape:
    mode: str = "replay"
    recorded: Cassette | None = None
    match: str = "request"
    ignore: list[re.Pattern[str]] = field(default_factory=list)
    fork: Fork | None = None
    agent: str = ""
    # Set by the engine once the run exists: run id -> its ActiveRun (redaction, sandbox).
    context: Callable[[str], Any] = lambda run_id: None
    gateway: str = ""
    # What this run asked and got, as a cassette (``update`` saves it), and whence each turn.
    played: Cassette = field(init=False)
    sources: list[str] = field(default_factory=list)
    mismatch: list[str] | None = None  # the report of the first difference (replay mode)
    live_from: int | None = None  # update: the first turn the live model answered
    substitutions: Substitutions = field(default_factory=Substitutions)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # What ``_normalised`` did so far, per kind: (value, its normal form) and the redactor.
    _done: dict[str, tuple[list[tuple[Any, Any]], Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.played = Cassette(self.agent)

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process sends back (``al test -n``): the record, without its ties to
        the run that made it."""
        state = dict(self.__dict__)
        del state["context"], state["_lock"]
        state["_done"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock(), context=lambda run_id: None)

    def wrap(self, registry: Any) -> Any:
        """``registry`` with its providers answering through this tape."""
        providers = {name: TapedProvider(p, self) for name, p in registry.providers.items()}
        return TapedRegistry(registry, providers)

    @property
    def may_go_live(self) -> bool:
        return self.mode != "replay" or self.fork is not None

    # ------------------------------------------------------------------ one turn

    def complete(
        self,
        provider: Any,
        messages: list[Message],
        tools: list[ToolSpec],
        model: Any,
        options: dict[str, Any],
    ) -> Reply:
        with self._lock:  # a run asks one turn at a time; the lock keeps the record whole
            turn = len(self.played.turns) + 1
            request = self._request(messages, tools, model, options)
            if self._from_recording(turn, request):
                reply = self.substitutions.denormalise(self.recorded.turns[turn - 1]["reply"])
                answer, source = reply_of(reply), PLAYED
            else:
                ask = lambda shown: provider.complete(shown, tools, model, options)  # noqa: E731
                answer, source = self._ask(provider, model, turn, ask, messages), ASKED
            self.played.add(
                request, model_dict(model), self.substitutions.normalise(reply_dict(answer))
            )
            self.sources.append(source)
            return answer

    def _request(
        self, messages: list[Message], tools: list[ToolSpec], model: Any, options: dict[str, Any]
    ) -> dict[str, Any]:
        """The request as a cassette holds it: redacted as stored, placeholders for this run's
        own values (tools are specs: nothing of a run is in them)."""
        run = self.context(str(options.get("run_id") or ""))
        if run is not None and not self.substitutions.values:
            sandbox = run.sandbox
            self.substitutions.values = {
                "workdir": sandbox.workdir if sandbox is not None else "",
                "run_id": run.run_id,
                "gateway": self.gateway,
            }
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        return {
            "model": model_dict(model),
            "system": self._normalised([system], run, "system")[0],
            "tools": tool_dicts(tools),
            "messages": self._normalised(
                [m.to_dict() for m in messages if m.role != "system"], run, "messages"
            ),
        }

    def _normalised(self, values: list[Any], run: Any, kind: str) -> list[Any]:
        """``values`` redacted and normalised. A run's messages only grow: those done before
        are kept, until the run's redactor changes (a new ``setenv`` value: all again)."""
        redactor = id(run.stored_redactor) if run is not None else None
        done, key = self._done.get(kind, ([], None))
        if key != redactor or values[: len(done)] != [v for v, _ in done]:
            done = []
        for value in values[len(done) :]:
            shown = run.redact_obj(value) if run is not None else value
            done.append((value, self.substitutions.normalise(shown)))
        self._done[kind] = (done, redactor)
        return [normal for _, normal in done]

    def _from_recording(self, turn: int, request: dict[str, Any]) -> bool:
        """Whether the recording answers ``turn``; raises CassetteMismatch in replay mode when
        it cannot."""
        if self.mode == "live":
            return False
        if self.fork is not None:
            return turn <= self.fork.turns
        if self.live_from is not None:
            return False
        recorded = self.recorded
        found = recorded is not None and turn <= len(recorded.turns)
        lines = (
            difference(recorded.request(turn), request, self.match, self.ignore)
            if found
            else [self._beyond(turn)]
        )
        if not lines:
            return True
        if self.mode == "update":
            self.live_from = turn
            return False
        self.mismatch = [f"turn {turn} differs from the recording:", *lines]
        raise CassetteMismatch(
            f"cassette: turn {turn} differs from the recording ({lines[0].rstrip(':')}); "
            "`al test --update` records it again from the live model"
        )

    def _beyond(self, turn: int) -> str:
        had = len(self.recorded.turns) if self.recorded is not None else 0
        return f"the run asked for turn {turn}; the recording ends after turn {had}"

    def _ask(
        self,
        provider: Any,
        model: Any,
        turn: int,
        ask: Callable[[list[Message]], Reply],
        messages: list[Message],
    ) -> Reply:
        """The live model's answer to ``messages`` (after a fork, to the checkpoint's)."""
        kind = getattr(provider, "credential_type", None)
        if kind and model.api_key is None and getattr(provider, "key_required", True):
            raise AuthError(
                f"model {model.name!r} answers turn {turn} live and needs a {kind} credential; "
                f"add it with `al creds add {kind}`"
            )
        return ask(self._checkpoint_view(messages) if self.fork is not None else messages)

    def _checkpoint_view(self, messages: list[Message]) -> list[Message]:
        """After a fork: the system prompt of now, the recorded conversation up to the fork
        point (this run's values put back), then what this run added since."""
        assert self.fork is not None
        checkpoint = self.substitutions.denormalise(self.fork.checkpoint)
        systems = [m for m in messages if m.role == "system"]
        rest = [m for m in messages if m.role != "system"]
        if len(rest) < len(checkpoint):
            return messages  # the run took another path than the recording: as it is
        return [*systems, *(Message.from_dict(m) for m in checkpoint), *rest[len(checkpoint) :]]


class TapedRegistry:
    """A registry whose providers are a tape's; every other kind is the registry's own, read
    through it: collected (and each plugin's registration checked) once for all the cases,
    not once per case as a copy of a registry whose kinds are collected on first use was."""

    def __init__(self, registry: Any, providers: dict[str, Any]):
        self._registry = registry
        self.providers = providers

    def __getattr__(self, kind: str) -> Any:
        return getattr(self._registry, kind)


class TapedProvider:
    """A provider whose ``complete`` goes through a tape; everything else is the provider's own.
    No key is required to build a run's model chain: a replayed turn needs none, and a live one
    says so when it comes (``Tape._ask``)."""

    key_required = False

    def __init__(self, provider: Any, tape: Tape):
        self._provider = provider
        self._tape = tape

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: Any,
        options: Mapping[str, Any],
    ) -> Reply:
        return self._tape.complete(self._provider, messages, tools, model, dict(options))

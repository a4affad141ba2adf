"""The fence around a test run.

A test run is a real run: the agent's runtime starts its sandbox (host-user, Docker, ssh: the
same sandbox, hooks, prompts and tools as production), and the session runs in this process.
What binds it to production is cut:

- its store is a throwaway SQLite file under ``.al/tests/`` (never ``database`` nor
  ``$AL_DATABASE_URL``): nothing of it appears in ``al runs``, ``al stat``, ``al stats``, the
  spend ledger or any queue, and nothing of production is seen by it;
- the run is created directly, not queued or claimed: flow control, budgets and admission
  checks do not apply (``[flow]`` and ``[budget]`` are left out of the fenced project);
- what it emits goes nowhere: a call to another agent is answered from the case, a rerun or a
  requeue is noted and dropped, an event is only offered to the run's own waits;
- plugins' lifecycle hooks never hear of it (``Engine.fenced``), and its HTTP server serves the
  gateway alone (no webhook route, no dashboard, no telemetry);
- credentials staged into the sandbox are the case's test values (made-up ones for fields it
  does not give); the real store is read only for a model's key, and only when the live model
  may be asked.
"""

from __future__ import annotations

import copy
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.credentials import CredentialStore, is_staged
from llamaherd.engine import Engine
from llamaherd.project import Agent, Project, read_skill
from llamaherd.types import EmitResult, TriggerEvent

# Keys of a project or agent config that bind production: left out of a fenced project.
UNFENCED_PROJECT = ("budget", "database")
UNFENCED_AGENT = ("budget", "flow")
TESTS_DIR = "tests"  # under the project's state dir: the private stores of test runs
TEMPLATE = "empty.db"  # an empty store, copied for each test run


@dataclass
class Overrides:
    """What a case or ``al replay`` changes in the agent under test."""

    params: dict[str, Any] = field(default_factory=dict)  # merged over its [params]
    models: list[str] | None = None  # instead of its `models` (al replay --model)
    skill: Path | None = None  # a SKILL.md read instead of its own (al replay --skill)


@dataclass
class FencedProject(Project):
    """The project as configured, for a test run of ``target``: its own database, no budgets,
    no flow control, every agent runnable, ``target`` with the ``overrides``."""

    database: str = ""
    target: str = ""
    overrides: Overrides = field(default_factory=Overrides)

    @property
    def database_url(self) -> str:
        return self.database

    def _load_agent(self, name: str, path: Path) -> Agent:
        agent = super()._load_agent(name, path)
        config = {k: v for k, v in agent.config.items() if k not in UNFENCED_AGENT}
        config["scale"] = max(1, _int(config.get("scale"), 1))  # scale 0 runs nothing
        if name == self.target:
            wanted = self.overrides
            config["params"] = {**config.get("params", {}), **wanted.params}
            if wanted.models is not None:
                config["models"] = list(wanted.models)
            if wanted.skill is not None:
                skill = read_skill(wanted.skill)
                agent.meta, agent.body = skill.meta, skill.body
        agent.config = config
        return agent


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def fenced_project(
    project: Project, database: str, target: str, overrides: Overrides
) -> FencedProject:
    config = {k: v for k, v in copy.deepcopy(project.config).items() if k not in UNFENCED_PROJECT}
    return FencedProject(
        root=project.root,
        config=config,
        layering=project.layering,
        database=database,
        target=target,
        overrides=overrides,
    )


class CaseCredentials(CredentialStore):
    """The credentials of a test run. A type staged into sandboxes gets the case's values, and
    ``test-<type>-<field>`` for each field the case does not give; a type that never enters a
    sandbox (a model's key, a webhook secret) is read from the real store when ``live`` (the
    live model may be asked), else has none."""

    def __init__(
        self,
        root: Path,
        registry: Any,
        given: dict[tuple[str, str], dict[str, str]],
        *,
        live: bool,
    ):
        super().__init__(root)
        self.registry = registry
        self.given = given
        self.live = live
        self.real = CredentialStore()

    def read(self, type_name: str, instance: str = "default") -> dict[str, str] | None:
        kind = self.registry.credential_types.get(type_name)
        if kind is not None and not is_staged(kind):
            return self.real.read(type_name, instance) if self.live else None
        given = self.given.get((type_name, instance), {})
        names = [f.name for f in kind.fields] if kind is not None else []
        return {**{name: f"test-{type_name}-{name}" for name in names}, **given} or None

    def exists(self, type_name: str, instance: str = "default") -> bool:
        return bool(self.read(type_name, instance))


@dataclass
class CallAnswer:
    """How a test run's call to ``agent`` is answered: its return value, or an error."""

    agent: str
    value: Any = None
    error: str | None = None
    context: Any = None  # a matcher of the call's context (None: any call to the agent)


class FencedEngine(Engine):
    """The private engine of one test run (see the module docstring)."""

    fenced = True
    route_plugins = ("llamaherd.gateway",)

    def __init__(
        self,
        project: FencedProject,
        credentials: CaseCredentials,
        tape: Any,
        answers: list[CallAnswer],
        files: list[str],
        matches: Any,
    ):
        super().__init__(project)
        self.credentials = credentials
        self.registry = tape.wrap(self.registry)
        tape.context = lambda run_id: getattr(self.runner.live(run_id), "ctx", None)
        self.tape = tape
        self.answers = answers
        self.files = files  # paths whose contents are kept when the run ends
        self._matches = matches  # (expected, actual) -> bool: a call answer's context
        self.calls: list[dict[str, Any]] = []
        self.dropped: list[TriggerEvent] = []  # reruns, requeues: nothing leaves a test
        self.final_text = ""
        self.final_files: dict[str, bytes | None] = {}
        self._lock = threading.Lock()

    def serve(self, bind: str = "127.0.0.1", port: int = 0) -> None:
        super().serve(bind, port)
        self.tape.gateway = self.gateway_url

    def emit(
        self, event: TriggerEvent, *, coalesce: bool = False, waiting: list[Any] | None = None
    ) -> EmitResult:
        """An event is only offered to the run's own waits; a call to another agent is answered
        from the case; anything else (a rerun, a requeue) is dropped."""
        result = EmitResult(resumed=self._offer_to_waits(event, waiting))
        if result.resumed or not event.agent:
            return result
        if event.kind == "agent" and event.call_id is not None:
            self._answer_call(event)
        else:
            with self._lock:
                self.dropped.append(event)
        return result

    def emit_once(
        self, key: str, tick: float, event: TriggerEvent, *, coalesce: bool = False
    ) -> EmitResult | None:
        return self.emit(event, coalesce=coalesce)

    def _answer_call(self, event: TriggerEvent) -> None:
        """The callee's run, ended at once as the case says: its return value (or error)
        settles the call as a real callee's end would."""
        payload = event.payload
        context = payload.get("context", "")
        answer = next(
            (
                a
                for a in self.answers
                if a.agent == event.agent
                and (a.context is None or self._matches(a.context, context))
            ),
            None,
        )
        trigger = {"kind": "agent", "payload": payload, "prompt": "", "source": event.source}
        row = self.store.create_run(
            event.agent,
            "agent",
            trigger=trigger,
            call_id=event.call_id,
            caller_run=payload.get("caller_run"),
            call_depth=int(payload.get("depth") or 1),
        )
        if answer is not None and answer.error is None:
            self.store.set_return(row.id, answer.value)
            self.store.transition(row.id, "done", reason="answered by the test case")
        else:
            why = (
                answer.error
                if answer is not None
                else f"the test case does not answer calls to {event.agent!r} (add [[calls]])"
            )
            self.store.transition(row.id, "error", reason=why)
        with self._lock:
            self.calls.append(
                {"agent": event.agent, "context": context, "answered": answer is not None}
            )

    def run_hook(self, name: str, **kwargs: Any) -> None:
        """No plugin hears of a test run; its end is kept: the model's last text and the files
        the case asks about, read from the sandbox before it is removed."""
        if name != "run_finished":
            return
        run, result = kwargs["run"], kwargs["result"]
        self.final_text = result.text
        for path in self.files:
            self.final_files[path] = _read(run.sandbox, path)


def _read(sandbox: Any, path: str) -> bytes | None:
    if sandbox is None:
        return None
    where = path if path.startswith("/") else f"{sandbox.workdir.rstrip('/')}/{path}"
    try:
        return sandbox.get_file(where)
    except Exception:  # absent, unreadable, a directory: all "not there" to a test
        return None


def private_area(project: Project, registry: Any) -> Path:
    """A new directory under ``.al/tests/`` for one ``al test`` (private, like all of .al),
    holding an empty store every test run's store is a copy of (creating the tables of a
    store is most of opening one)."""
    import os
    import secrets

    from llamaherd.statedir import private_dir
    from llamaherd.store import Store

    private_dir(project.state_dir)
    base = project.state_dir / TESTS_DIR
    private_dir(base)
    _sweep(base)
    area = base / f"{os.getpid()}-{secrets.token_hex(4)}"
    area.mkdir(mode=0o700)
    Store.open(f"sqlite:///{area / TEMPLATE}", tables=registry.table_sets.values()).close()
    return area


def _sweep(base: Path) -> None:
    """Remove the areas of ``al test`` processes that died without removing theirs."""
    from llamaherd.processes import pid_alive

    for entry in base.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            remove_area(entry)


def private_store(area: Path, name: str) -> str:
    """The database URL of a new test run's store in ``area``: a copy of its empty store."""
    database = area / f"{name}.db"
    shutil.copyfile(area / TEMPLATE, database)
    return f"sqlite:///{database}"


def remove_area(area: Path) -> None:
    shutil.rmtree(area, ignore_errors=True)

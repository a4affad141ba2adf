"""pytest plugin with fixtures for llamaherd's tests and for third-party plugin authors.

pytest loads it wherever llamaherd is installed (a ``pytest11`` entry point): no ``-p`` needed.
Fixtures:

- ``tmp_project``: a throwaway project directory with helpers to write its config and agents;
- ``registered_plugin``: registers a plugin object in the process-wide manager and always
  unregisters it afterwards;
- ``al``: runs the real ``al`` command in a subprocess;
- ``offline_project``: a project whose agents run offline (scripted provider, host-user runtime
  as the current user; core's stand-ins where those plugins are not installed), with
  ``al(...)`` and ``store()`` helpers;
- ``fakes``: core's stand-in provider (``fake``), runtime (``local``) and credential type
  (``fake_token``) of :mod:`llamaherd.testing_fakes`, registered for the test;
- ``scheduler``: ``scheduler(project)`` starts ``al start`` as a real subprocess and stops it at
  teardown;
- ``started_trigger``: ``started_trigger(trigger, project)`` starts a trigger type on a real
  Engine with the TriggerContext a scheduler gives it, recording what it emits;
- ``webhook_server``: ``webhook_server(config, agents, credentials)`` serves a project's
  webhook routes from a real Engine on 127.0.0.1, with a client that signs each delivery as the
  source's real sender does, and claims the queued runs to show their prompts and the waits
  their events satisfy;
- ``fake_service``: ``fake_service(routes)`` serves a web service stand-in on 127.0.0.1 (each
  ``(method, path)`` answered by a function of the request), for credential types' ``validate``
  tests against a service's wire format;
- ``model_server``: a model API stand-in on 127.0.0.1 (real HTTP) answering queued replies and
  recording every request, for provider plugins' wire-format tests;
- ``chain_env``: builds a :class:`llamaherd.models.ModelChain` for a throwaway agent over the
  real plugin registry, with a controllable circuit-breaker clock and recorded events;
- ``ssh_server``, ``sshd`` and ``ssh_user``: a real OpenSSH server on 127.0.0.1 and throwaway
  OS users it lets in (:mod:`llamaherd.testing_ssh`; root and openssh-server), and
  ``gateway_stub``, a unix socket standing in for the gateway a remote run is forwarded.

And ``fuzz_webhook_source(server, name, ...)``, property tests of one webhook source's
signature checks (needs hypothesis); ``fake_distribution(site, ...)``, a throwaway installed
distribution with one entry point, and ``source_distribution(site, path)``, a distribution of
this checkout as if installed (both for ``al`` subprocesses, with nothing installed);
``wait_until(predicate, ...)``, bounded polling; ``thread_switches(pid)`` and ``settled(pid)``,
whether a process woke (its threads' context switches); ``chat_reply(text, tool_calls)`` (also
a fixture), an OpenAI Chat Completions body;
``postgres_schema(server_url)``, a throwaway PostgreSQL schema (needs psycopg2), and the
``database_url`` fixture built on it: each test using it runs on SQLite and on PostgreSQL.

A test that needs a system service the machine may lack (a Docker daemon, PostgreSQL,
Chromium, an OpenSSH server, root...) carries its marker or calls ``require_service(name)``:
skipped where it is missing, with one line naming it and the command that brings it up, and
counted in the run's summary; a failure under ``AL_REQUIRE_SERVICES=1``
(:mod:`llamaherd.testing_services`).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llamaherd.testing_services import (  # noqa: F401 (pytest hooks)
    pytest_configure,
    pytest_runtest_setup,
    pytest_terminal_summary,
    require_service,
    service_unavailable,
)
from llamaherd.testing_ssh import gateway_stub, ssh_server, ssh_user, sshd  # noqa: F401 (fixtures)

AL = Path(sys.executable).with_name("al")


def _pg_execute(server_url: str, sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(server_url)
    try:
        conn.autocommit = True
        conn.cursor().execute(sql)
    finally:
        conn.close()


@contextmanager
def postgres_schema(server_url: str, prefix: str = "t_") -> Iterator[tuple[str, str]]:
    """A fresh schema on the PostgreSQL server at ``server_url`` for the ``with`` block: yields
    its name and a database URL whose search_path is that schema; dropped (CASCADE) after."""
    name = prefix + uuid.uuid4().hex[:12]
    _pg_execute(server_url, f"CREATE SCHEMA {name}")
    sep = "&" if "?" in server_url else "?"
    try:
        yield name, f"{server_url}{sep}options=-csearch_path%3D{name}"
    finally:
        _pg_execute(server_url, f"DROP SCHEMA {name} CASCADE")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database URL for a fresh store, once per backend: an SQLite file under ``tmp_path``,
    then a throwaway PostgreSQL schema (skipped unless ``AL_TEST_POSTGRES_URL`` names a
    server). For plugins' table sets, which must work on both."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/.al/work-queue.db"
        return
    require_service("postgres")
    with postgres_schema(os.environ["AL_TEST_POSTGRES_URL"]) as (_, url):
        yield url


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 30,
    interval: float = 0.05,
    *,
    what: str = "condition",
    ignore: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy; return
    that. AssertionError naming ``what`` after ``timeout`` seconds. Exceptions of the types in
    ``ignore`` count as a falsy result (e.g. a store failing while the disk is full)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except ignore:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout:g} s")


def thread_switches(pid: int) -> int:
    """Voluntary context switches of every thread of process ``pid`` so far: each time one of
    them blocked again after waking (Linux /proc). Unchanged over a while: nothing woke."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        total += int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return total


def settled(pid: int, quiet: float = 1.0, within: float = 15.0) -> bool:
    """Wait until no thread of process ``pid`` has woken for ``quiet`` seconds (its start-up is
    over), ``within`` seconds at most; whether it settled."""
    deadline = time.monotonic() + within
    before = thread_switches(pid)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = thread_switches(pid)
        if now == before:
            return True
        before = now
    return False


def imported_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules loaded when `al ARGS` ends (no ARGS: a bare interpreter's), read from
    ``sys.modules`` at exit: ``-X importtime`` misses what ``importlib.import_module`` loads."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('\\n'.join(sys.modules), file=sys.stderr))\n"
        f"sys.argv = ['al', *{list(args)!r}]\n"
        + ("from llamaherd.cli import main\nmain()\n" if args else "")
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return {line.strip() for line in done.stderr.splitlines() if line.strip()}


def source_distribution(site: Path, path: Path) -> dict[str, str]:
    """The environment under which a process finds the distribution whose source is at ``path``
    (a pyproject.toml, code under ``src/``) as if pip had installed it, entry points included:
    a dist-info written to directory ``site`` and ``PYTHONPATH``. Nothing is installed, so tests
    sharing an environment never see each other's plugins."""
    import tomllib

    project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    groups = project.get("entry-points", {})
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
            for group, points in groups.items()
        )
    )
    return {"PYTHONPATH": os.pathsep.join([str(site), str(path / "src")])}


def fake_distribution(site: Path, dist: str, entry_point: str, module: str, code: str) -> None:
    """A minimal installed distribution in directory ``site`` (a dist-info and one module
    holding ``code``) with one ``llamaherd`` entry point: put ``site`` on ``PYTHONPATH`` of an
    ``al`` subprocess and the plugin loads as if pip had installed it."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[llamaherd]\n{entry_point} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(code))


class TmpProject:
    """A project directory under pytest's ``tmp_path``."""

    def __init__(self, root: Path):
        self.root = root
        (root / "agents").mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, text: str) -> Path:
        """Write ``text`` (dedented) to a file of the project; return its path."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def config(self, text: str) -> Path:
        """Write the project ``config.toml``."""
        return self.write("config.toml", text)

    def add_agent(
        self,
        name: str,
        config: str | None = "",
        *,
        description: str = "A test agent.",
        body: str = "Do the thing.",
        skill: str | None = None,
    ) -> Path:
        """Create ``agents/<name>/`` with a SKILL.md (``skill`` verbatim, or built from
        name/description/body) and a config.toml (``config``; None writes none)."""
        skill_text = (
            skill
            if skill is not None
            else f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
        )
        self.write(f"agents/{name}/SKILL.md", skill_text)
        if config is not None:
            self.write(f"agents/{name}/config.toml", config)
        return self.root / "agents" / name

    def load(self) -> Any:
        """A fresh :class:`llamaherd.project.Project` of this directory."""
        from llamaherd.project import load_project

        return load_project(self.root)


@pytest.fixture
def tmp_project(tmp_path: Path) -> TmpProject:
    """An empty project (``agents/`` only) in a temporary directory."""
    return TmpProject(tmp_path / "project")


@pytest.fixture
def registered_plugin() -> Iterator[Callable[..., Any]]:
    """``registered_plugin(obj, name="test-plugin")`` registers ``obj`` (a module or an object
    with ``@hookimpl`` methods) with the process-wide manager; it is unregistered at teardown
    even when the test fails."""
    from llamaherd.plugins import get_manager

    names: list[str] = []

    def register(plugin: Any, name: str = "test-plugin") -> Any:
        get_manager().register(plugin, name)
        names.append(name)
        return get_manager().registry()

    try:
        yield register
    finally:
        for name in reversed(names):
            get_manager().unregister(name)


@pytest.fixture
def fakes(registered_plugin: Callable[..., Any]) -> Any:
    """Core's stand-in provider (``fake``) and runtime (``local``), registered in this process
    for the test (see :mod:`llamaherd.testing_fakes`); returns the registry."""
    import importlib

    return registered_plugin(importlib.import_module(FAKES), FAKES)


@pytest.fixture
def al(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``al(*args, cwd=None, env=None, input=None, timeout=60)`` runs this environment's ``al``.

    The credential store defaults to an empty directory under ``tmp_path`` so tests never read
    or write the user's; ``env`` entries are added to (or, with value None, removed from) the
    current environment.
    """

    def run(
        *args: str,
        cwd: Path | str | None = None,
        env: dict[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        environ = {**os.environ, "AL_CREDENTIALS_DIR": str(tmp_path / "credentials")}
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        return subprocess.run(
            [str(AL), *args],
            cwd=cwd,
            env=environ,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


FAKES = "llamaherd.testing_fakes"  # core's stand-in provider ("fake") and runtime ("local")

OFFLINE_CONFIG = """
[models.scripted]
provider = "{provider}"
model = "scripted"

[gateway]
port = 0
"""


def with_fakes(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with core's stand-in plugins added to ``AL_PLUGINS``,
    for an ``al`` subprocess."""
    env = dict(os.environ if env is None else env)
    names = [n for n in env.get("AL_PLUGINS", "").split(",") if n.strip()]
    env["AL_PLUGINS"] = ",".join(dict.fromkeys([*names, FAKES]))
    return env


def scripted_plugins_installed() -> bool:
    """Whether the scripted provider and the host-user runtime load in this environment."""
    from llamaherd.plugins import registry

    return "scripted" in registry().providers and "host-user" in registry().runtimes


class OfflineProject(TmpProject):
    """A project whose agents use the scripted provider and the host-user runtime as the
    current user: real runs with no network, no API key and no Docker. Where those plugins are
    not installed (or with ``fakes=True``) core's stand-ins take their place: the ``fake``
    provider (plain ``script.toml`` turns, see :mod:`llamaherd.testing_fakes`) and the
    ``local`` runtime, loaded into ``al`` subprocesses through ``AL_PLUGINS``.

    ``env`` is added to the environment of ``al(...)`` and of a :class:`SchedulerProcess` of
    this project; ``creds`` (need not exist) isolates the credential store there
    (``AL_CREDENTIALS_DIR``); ``timeout`` is the default of ``al(...)``.
    """

    def __init__(
        self,
        root: Path,
        settings: str = "",
        *,
        env: dict[str, str] | None = None,
        creds: Path | None = None,
        timeout: float = 120,
        fakes: bool | None = None,
    ):
        super().__init__(root)
        self.fakes = not scripted_plugins_installed() if fakes is None else fakes
        # What its agents run on (a test may name them in what it expects).
        self.provider = "fake" if self.fakes else "scripted"
        self.runtime = "local" if self.fakes else "host-user"
        # Top-level settings must come before the first [table].
        self.config(textwrap.dedent(settings) + OFFLINE_CONFIG.format(provider=self.provider))
        self.env = dict(env or {})
        if self.fakes:
            self.env["AL_PLUGINS"] = with_fakes(self.env)["AL_PLUGINS"]
        self.creds = creds
        if creds is not None:
            self.env["AL_CREDENTIALS_DIR"] = str(creds)
        self.timeout = timeout

    def add_scripted_agent(
        self,
        name: str,
        config: str = "",
        script: str | None = None,
        *,
        run_as: str | None = None,
    ) -> Path:
        """An agent with ``config`` (any TOML, tables included) and an optional ``script.toml``,
        run by the host-user runtime as ``run_as`` (default: the current user). Its models are
        ``["scripted"]`` unless ``config`` sets ``models``."""
        config = textwrap.dedent(config)
        user = run_as or getpass.getuser()
        offline = (
            f'runtime = {{ type = "{self.runtime}" }}\n'
            if self.fakes
            else f'runtime = {{ type = "{self.runtime}", run_as = "{user}" }}\n'
        )
        if not re.search(r"^models\s*=", config, re.MULTILINE):
            offline = 'models = ["scripted"]\n' + offline
        path = self.add_agent(name, offline + config)
        if script is not None:
            self.write(f"agents/{name}/script.toml", script)
        return path

    def al(
        self,
        *args: str,
        timeout: float | None = None,
        check: bool = False,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "llamaherd", "--project", str(self.root), *args],
            capture_output=True,
            text=True,
            timeout=self.timeout if timeout is None else timeout,
            env={**os.environ, **self.env, **(env or {})},
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"al {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def store(self) -> Any:
        from llamaherd.store import Store

        return Store.open(self.load().database_url, str(self.root))

    def wait_run(self, predicate: Callable[[list[Any]], Any], timeout: float = 30) -> Any:
        """Poll the store until ``predicate(runs)`` (the latest 200 runs) is truthy; return it."""
        store = self.store()
        try:
            return wait_until(
                lambda: predicate(store.runs(limit=200)), timeout, what="run condition"
            )
        finally:
            store.close()


class StartedTrigger:
    """A trigger type started on a real Engine of ``project`` exactly as a scheduler starts it
    (``trigger.start(ctx)`` with core's TriggerContext). ``fired`` records every event it
    emitted that was not a tick claimed before, as ``(event, coalesce)``; :meth:`settled`
    waits until it has handled the clock's time; ``stop()`` stops the trigger and closes the
    engine."""

    def __init__(self, trigger: Any, project: TmpProject):
        from llamaherd.engine import Engine
        from llamaherd.scheduler import TriggerHost

        self.trigger = trigger
        self.engine = Engine(project.load())
        self.fired: list[tuple[Any, bool]] = []
        self._asleep_at: float | None = None  # the clock when it last went to sleep, asleep
        fired = self.fired
        started = self

        class Recording(TriggerHost):
            def sleep(self, wake: threading.Event, until: float | None) -> bool:
                started._asleep_at = self.clock()
                try:
                    return super().sleep(wake, until)
                finally:
                    started._asleep_at = None

            def emit(self, event: Any, *, coalesce: bool = False) -> Any:
                result = super().emit(event, coalesce=coalesce)
                fired.append((event, coalesce))  # after: a test that sees it sees it queued
                return result

            def emit_once(
                self, key: str, tick: float, event: Any, *, coalesce: bool = False
            ) -> Any:
                result = super().emit_once(key, tick, event, coalesce=coalesce)
                if result is not None:
                    fired.append((event, coalesce))
                return result

        self.ctx = Recording(self.engine, trigger)
        trigger.start(self.ctx)

    def settled(self, timeout: float = 30) -> None:
        """Wait until the trigger sleeps, having looked at the fake clock's time (a sleep ends
        when such a clock is set): whatever that time makes due has been emitted; to assert
        that nothing was, without sleeping."""
        from llamaherd.clock import clock

        def asleep() -> bool:
            at = self._asleep_at
            return at is not None and at >= clock()

        wait_until(asleep, timeout, 0.01, what="the trigger asleep at the clock's time")

    def stop(self) -> None:
        self.trigger.stop()
        self.engine.close()


@pytest.fixture
def started_trigger() -> Iterator[Callable[[Any, TmpProject], StartedTrigger]]:
    """``started_trigger(trigger, project)``: a :class:`StartedTrigger`; all are stopped at
    teardown."""
    started: list[StartedTrigger] = []

    def start(trigger: Any, project: TmpProject) -> StartedTrigger:
        started.append(StartedTrigger(trigger, project))
        return started[-1]

    try:
        yield start
    finally:
        for run in started:
            run.trigger.stop()


class SchedulerProcess:
    """``al start`` as a real subprocess; ``url``, ``token`` and an authorised ``http`` session
    once it is up: its agents loaded, or (``ready=False``) once it listens, its agents maybe
    still loading (``llamaherd.loading``)."""

    def __init__(self, project: TmpProject, env: dict[str, str] | None = None, ready: bool = True):
        import requests

        self.project = project
        self.log_path = project.root / f"scheduler-{time.monotonic_ns()}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llamaherd",
                    "--project",
                    str(project.root),
                    "start",
                    "--grace",
                    "5",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **getattr(project, "env", {}), **(env or {})},
            )
        try:
            info = self._wait_for_info(project.root / ".al" / "scheduler.json", ready)
        except BaseException:  # not up in time (a loaded machine): it must not outlive the test
            self.kill9()
            raise
        self.url = info["url"]
        self.token = (project.root / ".al" / "control-token").read_text().strip()
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def _wait_for_info(self, path: Path, ready: bool, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = json.loads(path.read_text())
                if info["pid"] == self.proc.pid and not (ready and info.get("loading")):
                    return info  # it listens before it loads its agents
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"scheduler exited {self.proc.returncode}: {self.read_log()}")
            time.sleep(0.05)
        raise AssertionError(f"scheduler did not start: {self.read_log()}")

    def read_log(self) -> str:
        return self.log_path.read_text()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.http.post(self.url + path, json=body, timeout=30)

    def get(self, path: str) -> Any:
        return self.http.get(self.url + path, timeout=30)

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode


@pytest.fixture
def offline_project(tmp_path: Path) -> OfflineProject:
    """An offline project (scripted provider, host-user runtime as the current user; core's
    stand-ins where those are not installed)."""
    return OfflineProject(tmp_path / "project")


@pytest.fixture
def scheduler() -> Iterator[Callable[..., SchedulerProcess]]:
    """``scheduler(project, env=None, ready=True)`` starts a real scheduler (``SchedulerProcess``);
    all are stopped at teardown."""
    started: list[SchedulerProcess] = []

    def start(
        project: TmpProject, env: dict[str, str] | None = None, ready: bool = True
    ) -> SchedulerProcess:
        process = SchedulerProcess(project, env, ready)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()
            # Captured, so shown only in a failing test's report: what the scheduler did.
            print(f"--- scheduler log of {process.project.root} (tail) ---")
            print(process.read_log()[-6000:])


class WebhookServer:
    """A real Engine of a project serving every plugin's routes on 127.0.0.1. No dispatcher
    runs: what a delivery queued stays queued until ``next_run`` claims it."""

    def __init__(self, project: TmpProject):
        import requests

        from llamaherd.engine import Engine

        self.engine = Engine(project.load())
        self.engine.serve("127.0.0.1", 0)
        self.url = self.engine.gateway_url
        self.http = requests.Session()

    def source(self, name: str) -> Any:
        """The webhook source of ``[webhooks.<name>]``, set up for that table."""
        table = self.engine.project.config["webhooks"][name]
        source = self.engine.registry.webhook_sources[table.get("type", "generic")]
        return source.configured(table) if hasattr(source, "configured") else source

    def send(
        self,
        name: str,
        payload: Any = None,
        *,
        secret: str | None,
        event: str | None = None,
        delivery: str | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        renew: bool = True,
    ) -> Any:
        """POST ``payload`` as JSON (or ``body`` as is) to ``/webhooks/<name>`` as delivery
        ``delivery`` (default: a new id) with the headers the source's ``request_headers``
        gives (signed with ``secret``; None: unsigned), then ``headers`` on top. A source that
        keeps a timestamp or the delivery id inside the body gets them set first (its
        ``renew``), unless ``renew`` is False."""
        source = self.source(name)
        raw = body if body is not None else json.dumps(payload).encode()
        delivery = delivery or str(uuid.uuid4())
        if renew and hasattr(source, "renew"):
            raw = source.renew(raw, delivery)
        sent = source.request_headers(raw, event, delivery, secret)
        sent.update(headers or {})
        return self.http.post(f"{self.url}/webhooks/{name}", data=raw, headers=sent, timeout=10)

    def depth(self) -> dict[str, int]:
        """Queued items per agent (agents with none left out)."""
        return {agent: n for agent, n in self.engine.store.queue_depth().items() if n}

    def next_run(self) -> Any:
        """Claim the next queued item as the dispatcher would: its Run (None when none)."""
        claimed = self.engine.claim()
        return None if claimed is None else claimed[1]

    def prompt(self, run: Any) -> str:
        """The user prompt ``run`` starts with, built as its session builds it."""
        from llamaherd.prompts import build_prompts

        agent = self.engine.project.agents[run.agent]
        return build_prompts(agent, self.engine.registry, run.trigger)[1]

    def trigger_block(self, run: Any) -> list[str]:
        """The lines of the ``<webhook-trigger>`` block ``run``'s prompt ends with."""
        prompt = self.prompt(run)
        return prompt[prompt.index("<webhook-trigger>") :].splitlines()

    def waits_for(self, run: Any, wait_filter: dict[str, Any]) -> bool:
        """Whether a ``wait_for_trigger(wait_filter)`` would take the event that queued
        ``run`` (``type`` defaults to ``webhooks``)."""
        from llamaherd.types import TriggerEvent
        from llamaherd.waits import filter_matches

        trigger = run.trigger
        event = TriggerEvent(run.agent, "webhook", trigger["payload"], source=trigger["source"])
        return filter_matches(self.engine.registry, {"type": "webhooks", **wait_filter}, event)

    def close(self) -> None:
        self.engine.close()


def fuzz_webhook_source(
    server: WebhookServer,
    name: str,
    *,
    secret: str,
    wrong_secret: str,
    header_names: Sequence[str],
    examples: int = 60,
) -> None:
    """Property tests (hypothesis) of ``/webhooks/<name>`` on ``server``: whatever headers (of
    ``header_names`` and a few common ones, any values) and body arrive, unsigned or signed by a
    sender holding ``wrong_secret``, the answer is 401 (429 once the sender has had its share of
    rejections) and nothing is queued; any body signed with ``secret`` is answered 200, 202, 400
    or 401/429 (a stale timestamp inside it), never a 5xx or a failure to process."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    sendable = re.compile(r"^\S[^\r\n]*$|^$")  # no line breaks, no leading space (requests')
    text = st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
        max_size=80,
    ).filter(sendable.match)
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=20,
    )
    bodies = st.one_of(st.binary(max_size=2048), json_values.map(lambda v: json.dumps(v).encode()))
    names = [*header_names, "Content-Type", "X-Anything"]
    headers = st.dictionaries(st.sampled_from(names), text, max_size=6)
    source = server.source(name)
    url = f"{server.url}/webhooks/{name}"
    fuzz = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )

    @fuzz
    @given(headers=headers, body=bodies, forged=st.booleans())
    def refused(headers: dict[str, str], body: bytes, forged: bool) -> None:
        if forged:  # well-formed, but made with a secret the receiver does not hold
            headers = {**headers, **source.request_headers(body, None, "fuzz", wrong_secret)}
        response = server.http.post(url, data=body, headers=headers, timeout=10)
        assert response.status_code in (401, 429), (response.status_code, response.text)
        assert server.depth() == {}

    @fuzz
    @given(headers=headers, body=bodies)
    def signed(headers: dict[str, str], body: bytes) -> None:
        sent = {**headers, **source.request_headers(body, None, str(uuid.uuid4()), secret)}
        response = server.http.post(url, data=body, headers=sent, timeout=10)
        answered = (200, 202, 400, 401, 429)
        assert response.status_code in answered, (response.status_code, response.text)

    refused()
    signed()


@pytest.fixture
def webhook_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., WebhookServer]]:
    """``webhook_server(config, agents={name: config.toml}, credentials={(type, instance):
    values})``: a :class:`WebhookServer` of a new project with that ``config.toml``, those agents
    and those credentials in a store of its own; closed at teardown."""
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    started: list[WebhookServer] = []

    def start(
        config: str,
        agents: dict[str, str] | None = None,
        credentials: dict[tuple[str, str], dict[str, str]] | None = None,
    ) -> WebhookServer:
        from llamaherd.credentials import CredentialStore

        store = CredentialStore()
        for (type_name, instance), values in (credentials or {}).items():
            store.write(type_name, instance, values)
        project = TmpProject(tmp_path / f"project-{len(started)}")
        project.config(config)
        for name, agent_config in (agents or {}).items():
            project.add_agent(name, agent_config)
        started.append(WebhookServer(project))
        return started[-1]

    try:
        yield start
    finally:
        for server in started:
            server.close()


class ModelServer(ThreadingHTTPServer):
    """Answers POSTs from ``replies`` (status, body, headers, delay) and records each request
    as {path, headers, body}. With nothing queued it answers 500, or, with ``repeat_last``,
    repeats the last reply. A client that closes the connection during a reply's ``delay`` is
    noticed at once: its request record gets ``closed_after`` (seconds into the delay) and no
    reply is sent, as a model API stops generating for a client that went away."""

    daemon_threads = True

    def __init__(self, repeat_last: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: list[tuple[int, Any, dict[str, str], float]] = []
        self.requests: list[dict[str, Any]] = []
        self.repeat_last = repeat_last

    def next_reply(self) -> tuple[int, Any, dict[str, str], float]:
        if not self.replies:
            return (500, {"error": "none queued"}, {}, 0)
        if self.repeat_last and len(self.replies) == 1:
            return self.replies[0]
        return self.replies.pop(0)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) is not an error here

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reply(
        self, status: int, body: Any, headers: dict[str, str] | None = None, delay: float = 0.0
    ) -> None:
        self.replies.append((status, body, headers or {}, delay))


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        record = {
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": json.loads(raw),
        }
        self.server.requests.append(record)
        status, body, headers, delay = self.server.next_reply()
        closed_after = self._client_gone_within(delay)
        if closed_after is not None:
            record["closed_after"] = closed_after
            return
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _client_gone_within(self, delay: float) -> float | None:
        """Wait ``delay`` seconds; the seconds after which the client closed, if it did."""
        import select
        import socket

        started = time.monotonic()
        while (left := delay - (time.monotonic() - started)) > 0:
            readable, _, _ = select.select([self.connection], [], [], left)
            if not readable:
                continue
            try:
                gone = not self.connection.recv(1, socket.MSG_PEEK)
            except OSError:  # reset by the client
                gone = True
            if gone:
                return time.monotonic() - started
            time.sleep(min(left, 0.05))  # a pipelined request: not ours to read here
        return None

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_server():
    server = ModelServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# What a fake_service route answers: (status, JSON-able body), given the request.
Route = Callable[[dict[str, Any]], tuple[int, Any]]


class FakeService(ThreadingHTTPServer):
    """A web service stand-in: ``routes[(method, path)]`` answers each request, given
    ``{"method", "path", "query", "headers", "body"}`` (headers lower-cased, body parsed as JSON
    when it is); an unknown route answers 404. Every request is recorded in ``requests``."""

    daemon_threads = True

    def __init__(self, routes: dict[tuple[str, str], Route]) -> None:
        super().__init__(("127.0.0.1", 0), _ServiceHandler)
        self.routes = routes
        self.requests: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ServiceHandler(BaseHTTPRequestHandler):
    server: FakeService

    def _answer(self) -> None:
        from urllib.parse import parse_qsl, urlsplit

        raw = self.rfile.read(int(self.headers.get("content-length", 0) or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        url = urlsplit(self.path)
        request = {
            "method": self.command,
            "path": url.path,
            "query": dict(parse_qsl(url.query)),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        self.server.requests.append(request)
        route = self.server.routes.get((self.command, url.path))
        status, answer = route(request) if route else (404, {"error": "no such route"})
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_service() -> Iterator[Callable[[dict[tuple[str, str], Route]], FakeService]]:
    """``fake_service(routes)``: a started :class:`FakeService`; all are stopped at teardown."""
    started: list[FakeService] = []

    def start(routes: dict[tuple[str, str], Route]) -> FakeService:
        server = FakeService(routes)
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.shutdown()
            server.server_close()


def chat_reply(text: str = "", tool_calls: Sequence[tuple[str, dict[str, Any]]] = ()) -> dict:
    """An OpenAI Chat Completions response body: ``text`` and/or ``[(tool, args), ...]``."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(tool_calls)
        ]
    return {
        "id": "x",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


@pytest.fixture(name="chat_reply")
def chat_reply_fixture() -> Callable[..., dict]:
    """:func:`chat_reply`, as a fixture."""
    return chat_reply


@pytest.fixture
def chain_env(tmp_project, monkeypatch):
    """Build a ModelChain for an agent over the real plugin registry, recording events."""
    from llamaherd.models import CircuitBreaker, ModelChain
    from llamaherd.plugins import registry

    monkeypatch.setenv("AL_RETRY_BASE_DELAY", "0.01")
    events: list[tuple[str, dict[str, Any]]] = []
    clock = SimpleNamespace(now=0.0)

    def make(config: str, models: list[str], keys: dict[tuple[str, str], dict[str, str]]):
        tmp_project.config(config)
        tmp_project.add_agent("bot", f"models = {json.dumps(models)}\n")
        project = tmp_project.load()
        return ModelChain(
            project,
            project.agent("bot"),
            registry(),
            lambda t, i: keys.get((t, i)),
            lambda kind, data: events.append((kind, data)),
            breaker=CircuitBreaker(60, lambda: clock.now),
        )

    return SimpleNamespace(make=make, events=events, clock=clock)

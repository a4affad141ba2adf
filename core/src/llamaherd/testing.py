"""pytest plugin with fixtures for llamaherd's tests and for third-party plugin authors.

Enable with ``-p llamaherd.testing`` (llamaherd's own pytest config does). Fixtures:

- ``tmp_project``: a throwaway project directory with helpers to write its config and agents;
- ``registered_plugin``: registers a plugin object in the process-wide manager and always
  unregisters it afterwards;
- ``al``: runs the real ``al`` command in a subprocess;
- ``offline_project``: a project whose agents run offline (scripted provider, host-user runtime
  as the current user), with ``al(...)`` and ``store()`` helpers;
- ``scheduler``: ``scheduler(project)`` starts ``al start`` as a real subprocess and stops it at
  teardown;
- ``started_trigger``: ``started_trigger(trigger, project)`` starts a trigger type on a real
  Engine with the TriggerContext a scheduler gives it, recording what it emits;
- ``model_server``: a model API stand-in on 127.0.0.1 (real HTTP) answering queued replies and
  recording every request, for provider plugins' wire-format tests;
- ``chain_env``: builds a :class:`llamaherd.models.ModelChain` for a throwaway agent over the
  real plugin registry, with a controllable circuit-breaker clock and recorded events.

And ``pip_installed(path, distribution)``, a context manager that really installs a plugin
distribution into the running environment for a test; ``wait_until(predicate, ...)``, bounded
polling; ``chat_reply(text, tool_calls)`` (also a fixture), an OpenAI Chat Completions body;
``postgres_schema(server_url)``, a throwaway PostgreSQL schema (needs psycopg2).
"""

from __future__ import annotations

import fcntl
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
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

AL = Path(sys.executable).with_name("al")


def _pip(*args: str) -> None:
    # No build isolation and no deps: hatchling and llamaherd are already installed, so this
    # needs no network and takes a second.
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True,
        capture_output=True,
        timeout=300,
    )


@contextmanager
def pip_installed(path: Path, distribution: str) -> Iterator[None]:
    """``pip install`` the distribution at ``path`` into this environment; uninstall it after.

    An exclusive lock on ``<venv>/.<distribution>-test.lock`` serialises every test (and test
    session) sharing the environment, so one's uninstall never lands in another's test. An
    already installed distribution (e.g. editable in a dev venv) is left as it is.
    """
    with open(Path(sys.prefix) / f".{distribution}-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            metadata.version(distribution)
            yield
            return
        except metadata.PackageNotFoundError:
            pass
        _pip("install", "--no-build-isolation", "--no-deps", str(path))
        try:
            yield
        finally:
            _pip("uninstall", "-y", distribution)


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


OFFLINE_CONFIG = """
[models.scripted]
provider = "scripted"
model = "scripted"

[gateway]
port = 0
"""


class OfflineProject(TmpProject):
    """A project whose agents use the scripted provider and the host-user runtime as the
    current user: real runs with no network, no API key and no Docker.

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
    ):
        super().__init__(root)
        # Top-level settings must come before the first [table].
        self.config(textwrap.dedent(settings) + OFFLINE_CONFIG)
        self.env = dict(env or {})
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
        offline = f'runtime = {{ type = "host-user", run_as = "{run_as or getpass.getuser()}" }}\n'
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
    emitted that was not a tick claimed before, as ``(event, coalesce)``; ``stop()`` stops the
    trigger and closes the engine."""

    def __init__(self, trigger: Any, project: TmpProject):
        from llamaherd.engine import Engine
        from llamaherd.scheduler import TriggerHost

        self.trigger = trigger
        self.engine = Engine(project.load())
        self.fired: list[tuple[Any, bool]] = []
        fired = self.fired

        class Recording(TriggerHost):
            def emit(self, event: Any, *, coalesce: bool = False) -> Any:
                fired.append((event, coalesce))
                return super().emit(event, coalesce=coalesce)

            def emit_once(
                self, key: str, tick: float, event: Any, *, coalesce: bool = False
            ) -> Any:
                result = super().emit_once(key, tick, event, coalesce=coalesce)
                if result is not None:
                    fired.append((event, coalesce))
                return result

        self.ctx = Recording(self.engine, trigger)
        trigger.start(self.ctx)

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
    once it is up."""

    def __init__(self, project: TmpProject, env: dict[str, str] | None = None):
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
        info = self._wait_for_info(project.root / ".al" / "scheduler.json")
        self.url = info["url"]
        self.token = (project.root / ".al" / "control-token").read_text().strip()
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def _wait_for_info(self, path: Path, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = json.loads(path.read_text())
                if info["pid"] == self.proc.pid:
                    return info
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
    """An offline project (scripted provider, host-user runtime as the current user)."""
    return OfflineProject(tmp_path / "project")


@pytest.fixture
def scheduler() -> Iterator[Callable[..., SchedulerProcess]]:
    """``scheduler(project, env=None)`` starts a real scheduler; all are stopped at teardown."""
    started: list[SchedulerProcess] = []

    def start(project: TmpProject, env: dict[str, str] | None = None) -> SchedulerProcess:
        process = SchedulerProcess(project, env)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


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

"""Core-only stand-ins for a model provider and a runtime, so a project runs with core alone.

``llamaherd.testing`` registers them in a test's process (``fakes`` fixture) and names this
module in ``AL_PLUGINS`` for ``al`` subprocesses, which load it as a plugin. Nothing here is
meant for production: the ``fake`` provider answers from a script, the ``local`` runtime runs
commands as the current user, without isolation, and the ``fake_token`` credential type
exports its one secret field as ``FAKE_TOKEN``.

The ``fake`` provider replays ``[[turns]]`` of the agent's ``script.toml`` (``text`` and
``tool_calls = [{name, arguments}]``), one per model call, chosen by counting the assistant
messages in the transcript; a last turn with ``loop = true`` answers every call after it; past
the last turn (or with no script) it answers ``done``. In strings, ``{{ last_result }}`` is the
latest tool result and ``{{ payload.<key> }}`` a value of the trigger's payload. (The
``llamaherd-scripted`` plugin reads the same file with more features.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llamaherd import hookimpl
from llamaherd.api import (
    ConfigError,
    CredentialField,
    ExecResult,
    Message,
    ModelConfig,
    Pricing,
    Reply,
    SandboxSpec,
    ToolCall,
    ToolSpec,
    Usage,
    read_toml,
)

PLACEHOLDER = re.compile(r"\{\{\s*(last_result|payload\.[\w-]+)\s*\}\}")
PRIVATE = ".private"  # suffix of a run's private dir, beside its working dir
SCRIPT = "script.toml"  # the scripted plugin's file; only its plain turns are understood


class FakeProvider:
    """Scripted replies with no network and no key."""

    name = "fake"
    description = "Test stand-in: replays the agent's script.toml turns (llamaherd.testing)."
    schema: dict[str, Any] = {}
    credential_type = None
    prices = {"*": Pricing(0.0, 0.0)}

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        turns = _turns(options)
        index = sum(1 for m in messages if m.role == "assistant")
        turn = _turn_at(turns, index)
        fill = _filler(messages, options)
        calls = [
            ToolCall(f"call-{index}-{i}", call["name"], fill(dict(call.get("arguments", {}))))
            for i, call in enumerate(turn.get("tool_calls", []))
        ]
        stop = "tool_use" if calls else "end_turn"
        return Reply(fill(str(turn.get("text", ""))), calls, Usage(10, 5), stop)


def _turn_at(turns: list[dict[str, Any]], index: int) -> dict[str, Any]:
    if index < len(turns):
        return turns[index]
    if turns and turns[-1].get("loop"):
        return turns[-1]
    return {"text": "done"}


def _filler(messages: list[Message], options: dict[str, Any]) -> Callable[[Any], Any]:
    """Fills ``{{ last_result }}`` and ``{{ payload.<key> }}`` into strings, nested or not."""
    last = next((m.content for m in reversed(messages) if m.role == "tool"), "")
    payload = (options.get("trigger") or {}).get("payload") or {}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "last_result":
            return str(last)
        found = payload.get(name.removeprefix("payload."), "") if isinstance(payload, dict) else ""
        return found if isinstance(found, str) else json.dumps(found)

    def fill(item: Any) -> Any:
        if isinstance(item, str):
            return PLACEHOLDER.sub(value, item)
        if isinstance(item, dict):
            return {key: fill(v) for key, v in item.items()}
        if isinstance(item, list):
            return [fill(v) for v in item]
        return item

    return fill


def _turns(options: dict[str, Any]) -> list[dict[str, Any]]:
    agent_dir = options.get("agent_dir")
    path = Path(agent_dir) / SCRIPT if agent_dir else None
    if path is None or not path.is_file():
        return []
    turns = read_toml(path).get("turns", [])
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ConfigError(str(path), "turns", "expected [[turns]] tables")
    return turns


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class LocalSandbox:
    """A run's working dir ``<project>/.al/local-runs/<run id>`` (its commands and credentials
    beside it in ``<run id>.private``); commands run there as the current user, each in its own
    process group."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root = root
        self.id = root.name
        self.workdir = str(root)
        self.env = env
        self.groups: set[int] = set()

    def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> ExecResult:
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd or self.workdir,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.groups.add(proc.pid)
        lines: list[str] = []
        reader = threading.Thread(target=_read, args=(proc, lines, on_output), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join()
        self.groups.discard(proc.pid)
        output = "".join(lines)
        duration = time.monotonic() - started
        return ExecResult(_exit_code(proc.returncode), output, timed_out, duration)

    def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = Path(self.workdir, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)

    def get_file(self, path: str) -> bytes:
        return Path(self.workdir, path).read_bytes()

    def pause(self) -> None:
        for group in list(self.groups):
            _signal_group(group, signal.SIGSTOP)

    def resume(self) -> None:
        for group in list(self.groups):
            _signal_group(group, signal.SIGCONT)

    def alive(self) -> bool:
        return self.root.is_dir()

    def kill(self) -> None:
        for group in list(self.groups):
            _signal_group(group, signal.SIGKILL)

    def cleanup(self) -> None:
        self.kill()
        _remove(self.root)

    def handle(self) -> dict[str, Any]:
        return {"workdir": self.workdir}


def _read(proc: subprocess.Popen, lines: list[str], on_output: Callable[[str], None] | None):
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace")
        lines.append(line)
        if on_output is not None:
            on_output(line)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def _runs(project: Any) -> Path:
    return Path(project.root) / ".al" / "local-runs"


def _private(root: Path) -> Path:
    return root.with_name(root.name + PRIVATE)


def _remove(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(_private(root), ignore_errors=True)


class LocalRuntime:
    """Runs an agent's commands as the current user: for tests of core without a runtime
    plugin. No isolation at all."""

    name = "local"
    description = "Test stand-in: commands as the current user, no isolation (llamaherd.testing)."
    schema: dict[str, Any] = {}

    def prepare(self, agent: Any, project: Any = None) -> None:
        """Nothing to prepare: the current user runs everything."""

    def start(self, spec: SandboxSpec) -> LocalSandbox:
        root = _runs(spec.project) / spec.run_id
        _remove(root)  # left by a start that crashed half-way
        return self._sandbox(root, spec)

    def _sandbox(self, root: Path, spec: SandboxSpec | None) -> LocalSandbox:
        bin_dir, credentials = _private(root) / "bin", _private(root) / "credentials"
        for path in (root, bin_dir, credentials):
            path.mkdir(parents=True, exist_ok=True)
        if spec is not None and spec.bin_dir and Path(spec.bin_dir).is_dir():
            shutil.copytree(spec.bin_dir, bin_dir, dirs_exist_ok=True)
        for staged in spec.credential_files if spec else []:
            target = credentials / staged.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(staged.content)
            target.chmod(staged.mode)
        extra = dict(spec.env) if spec else {}
        path = extra.pop("PATH", "/usr/local/bin:/usr/bin:/bin")
        env = {
            "HOME": str(root),
            "LANG": "C.UTF-8",
            **extra,
            **(spec.credential_env(str(credentials)) if spec else {}),
            "PATH": f"{bin_dir}:{path}",
            "AL_CREDENTIALS_PATH": str(credentials),
            "AL_RUN_ID": root.name,
        }
        return LocalSandbox(root, env)

    def attach(self, handle: dict[str, Any], spec: SandboxSpec | None) -> LocalSandbox | None:
        root = Path(handle.get("workdir", ""))
        return self._sandbox(root, spec) if root.name and root.is_dir() else None

    def cleanup_orphans(self, live_run_ids: set[str], project: Any = None) -> int:
        base = _runs(project) if project is not None else None
        if base is None or not base.is_dir():
            return 0
        runs = {entry.name.removesuffix(PRIVATE) for entry in base.iterdir()}
        orphans = runs - live_run_ids
        for run_id in orphans:
            _remove(base / run_id)
        return len(orphans)


class FakeToken:
    """A credential with one secret, exported to the sandbox as ``FAKE_TOKEN``."""

    name = "fake_token"
    description = "Test stand-in: one secret token as FAKE_TOKEN (llamaherd.testing)."
    fields = [CredentialField("token")]

    def env(self, values: dict[str, str], path: Any) -> dict[str, str]:
        return {"FAKE_TOKEN": values["token"]}

    def context(self, values: dict[str, str]) -> str:
        return "FAKE_TOKEN holds a test token."


@hookimpl
def register_credential_types(register: Any) -> None:
    register(FakeToken())


@hookimpl
def register_providers(register: Any) -> None:
    register(FakeProvider())


@hookimpl
def register_runtimes(register: Any) -> None:
    register(LocalRuntime())

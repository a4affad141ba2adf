"""Fixtures of the ssh runtime's tests: a real sshd on 127.0.0.1 (``llamaherd.testing``'s
``ssh_server``/``ssh_user``), projects whose agents run there, sandboxes started the way the
runner starts them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from llamaherd_ssh.runtime import SshRuntime

from llamaherd.api import SandboxSpec, StagedFile, load_project


@pytest.fixture
def host(sshd, ssh_user):
    """A user of a running sshd: the remote account an agent runs as."""
    return ssh_user(sshd)


@pytest.fixture
def make_agent(tmp_path: Path) -> Callable[..., Any]:
    """``make_agent(runtime, name=...)``: a project with one agent whose [runtime] table is
    ``runtime``; returns the Agent."""

    def make(runtime: dict[str, Any], name: str = "worker") -> Any:
        root = tmp_path / f"project-{name}"
        agent_dir = root / "agents" / name
        agent_dir.mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text("")
        (agent_dir / "SKILL.md").write_text(f"---\nname: {name}\n---\nDo the work.\n")
        (agent_dir / "config.toml").write_text(tomli_w.dumps({"runtime": runtime}))
        return load_project(root).agent(name)

    return make


@pytest.fixture
def runtime() -> Iterator[SshRuntime]:
    found = SshRuntime()
    try:
        yield found
    finally:
        found.masters.close()


@pytest.fixture
def spec_for(gateway_stub, tmp_path: Path) -> Callable[..., SandboxSpec]:
    """``spec_for(agent, files=(), env=None, run_id=...)``: the SandboxSpec the runner gives."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "al-hello").write_text('#!/bin/sh\necho "hello from $AL_RUN_ID"\n')
    (bin_dir / "al-hello").chmod(0o755)

    def make(
        agent: Any,
        files: tuple[StagedFile, ...] = (),
        env: dict[str, str] | None = None,
        run_id: str = "worker-0001",
        store: Any = None,
    ) -> SandboxSpec:
        return SandboxSpec(
            run_id=run_id,
            agent=agent,
            project=agent.project,
            credential_files=list(files),
            env={"AL_RUN_ID": run_id, "AL_RUN_TOKEN": "t0ken-" + run_id, **(env or {})},
            bin_dir=bin_dir,
            timeout=60,
            credential_env=lambda root: {"CRED_ROOT": root},
            gateway_socket=gateway_stub.path,
            store=store,
        )

    return make


@pytest.fixture
def start(runtime, make_agent, spec_for) -> Iterator[Callable[..., Any]]:
    """``start(runtime_table, **spec)``: a started sandbox; each is removed at teardown."""
    started: list[Any] = []

    def begin(table: dict[str, Any], **spec: Any) -> Any:
        sandbox = runtime.start(spec_for(make_agent(table), **spec))
        started.append(sandbox)
        return sandbox

    try:
        yield begin
    finally:
        for sandbox in started:
            try:
                sandbox.kill()
                sandbox.cleanup()
            except Exception:  # a test may have removed it already, or stopped its host
                pass

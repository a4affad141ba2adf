"""Fixtures for host-user tests: real OS users, a real project, real sandboxes."""

from __future__ import annotations

import pwd
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from llamaherd_host_user.identity import useradd_command
from llamaherd_host_user.runtime import HostUserRuntime
from llamaherd_host_user.sandbox import HostUserSandbox

from llamaherd.api import SandboxSpec, credential_files, load_project
from llamaherd.testing import require_service

AGENT_USER = "al-test-agent"
OTHER_USER = "al-test-agent2"


def ensure_user(name: str) -> pwd.struct_passwd:
    """Create a system user once; kept between sessions (creating users is slow and global)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(useradd_command(name), check=True, capture_output=True)
        return pwd.getpwnam(name)


@pytest.fixture(scope="session")
def agent_users() -> tuple[pwd.struct_passwd, pwd.struct_passwd]:
    require_service("root")  # host-user tests create OS users
    return ensure_user(AGENT_USER), ensure_user(OTHER_USER)


@pytest.fixture
def agent_user(agent_users) -> str:
    return agent_users[0].pw_name


@pytest.fixture
def other_user(agent_users) -> str:
    return agent_users[1].pw_name


@pytest.fixture
def make_agent(tmp_path: Path) -> Callable[..., object]:
    """Write a project with one agent whose [runtime] table is ``runtime``; return the Agent."""

    def make(name: str = "worker", **runtime: object) -> object:
        root = tmp_path / f"project-{name}"
        agent_dir = root / "agents" / name
        agent_dir.mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text("")
        (agent_dir / "SKILL.md").write_text(f"---\nname: {name}\n---\nDo the work.\n")
        lines = ["[runtime]", 'type = "host-user"']
        for key, value in runtime.items():
            if isinstance(value, bool):
                lines.append(f"{key} = {str(value).lower()}")
            elif isinstance(value, list):
                lines.append(f"{key} = {value!r}".replace("'", '"'))
            else:
                lines.append(f'{key} = "{value}"')
        (agent_dir / "config.toml").write_text("\n".join(lines) + "\n")
        return load_project(root).agent(name)

    return make


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A language-skill commands dir under a root-only path, as in a real install under /root."""
    directory = tmp_path / "bin"
    directory.mkdir()
    script = directory / "al-hello"
    script.write_text('#!/bin/sh\necho "hello from $AL_RUN_ID"\n')
    script.chmod(0o700)
    return directory


@pytest.fixture
def runtime() -> HostUserRuntime:
    return HostUserRuntime()


@pytest.fixture
def start(
    runtime: HostUserRuntime, make_agent: Callable[..., object], bin_dir: Path, agent_users: object
) -> Iterator[Callable[..., HostUserSandbox]]:
    """Start sandboxes for the test; every one is cleaned up afterwards."""
    started: list[HostUserSandbox] = []

    def start_sandbox(
        run_as: str = AGENT_USER,
        credentials: dict[str, dict[str, str]] | None = None,
        env: dict[str, str] | None = None,
        run_id: str | None = None,
        **runtime_table: object,
    ) -> HostUserSandbox:
        agent = make_agent(run_as=run_as, **runtime_table)
        sandbox = runtime.start(spec_for(agent, bin_dir, credentials, env, run_id))
        started.append(sandbox)
        return sandbox

    yield start_sandbox
    for sandbox in started:
        sandbox.cleanup()


def spec_for(
    agent: object,
    bin_dir: Path,
    credentials: dict[str, dict[str, str]] | None = None,
    env: dict[str, str] | None = None,
    run_id: str | None = None,
) -> SandboxSpec:
    return SandboxSpec(
        run_id=run_id or f"worker-{uuid.uuid4().hex[:12]}",
        agent=agent,
        project=agent.project,
        credential_files=credential_files({}, credentials or {}),
        env=env or {"AL_AGENT": agent.name},
        bin_dir=bin_dir,
        timeout=60,
        credential_env=lambda root: {"AL_TEST_CRED_ROOT": root},
    )

"""Fixtures of the deploy tests: a throwaway OS user that is the "server's" account (reached
through ``llamaherd.testing``'s real ``sshd`` on 127.0.0.1), a wheelhouse built from this
checkout, and ``deploy_al`` running ``al`` with isolated environment and credential stores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llamaherd import testing_wheels as wheelhouse
from llamaherd.testing_ssh import Sshd, SshUser

sys.path.insert(0, str(Path(__file__).parent))  # the tests' own helpers: fake_cloud


@pytest.fixture
def remote_user(sshd: Sshd, ssh_user: Callable[..., SshUser]) -> Iterator[SshUser]:
    """The "server's" account: a throwaway OS user with a home that ``sshd`` lets in with a
    fresh key; what was deployed to it is stopped and its run dirs removed at teardown."""
    user = ssh_user(sshd)
    try:
        yield user
    finally:
        user.kill_processes()  # only this throwaway user's: the scheduler we deployed
        shutil.rmtree(f"/tmp/al-runs-{user.uid}", ignore_errors=True)


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of llamaherd, every first-party plugin and all their dependencies: what a server
    without a package index installs from (``al push --wheels``)."""
    from importlib import metadata

    wanted = ["llamaherd"] + sorted(
        d.metadata["Name"]
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").startswith("llamaherd-") and wheelhouse.local_source(d)
    )
    return wheelhouse.build(tmp_path_factory.mktemp("wheels"), wanted)


@pytest.fixture
def deploy_al(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``deploy_al(*args, cwd=..., timeout=..., extra={VAR: value})``: this environment's ``al``
    with environments and credentials kept under ``tmp_path`` (``envs``, ``creds``)."""
    env = {
        **os.environ,
        "AL_ENVIRONMENTS_DIR": str(tmp_path / "envs"),
        "AL_CREDENTIALS_DIR": str(tmp_path / "creds"),
    }
    env.pop("AL_ENV", None)

    def run(
        *args: str,
        cwd: Path | None = None,
        timeout: float = 120,
        extra: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "llamaherd", *args],
            cwd=cwd or tmp_path,
            env={**env, **(extra or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run

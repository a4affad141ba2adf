"""Fixtures for the docker runtime's tests: a real daemon, our base image, sandboxes.

These tests need a Docker daemon and the local images ``.ci/docker.sh`` builds (no registry is
used). Without a daemon they fail loudly; runs without Docker deselect them with
``-m "not docker"``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llamaherd.api import SandboxError, SandboxSpec, credential_files
from llamaherd.testing import require_service, service_unavailable

# Built by .ci/docker.sh (../shared/scripts/docker-bootstrap.sh with PYTHON_IMAGE=1).
DEBIAN_IMAGE = "local/debian-python:bookworm"
BUSYBOX_IMAGE = "local/busybox:latest"
BASE_TAG = "al-agent:latest"
AL = Path(sys.executable).with_name("al")


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A connected client: every docker test is skipped where there is no daemon or the local
    images are missing (failed under AL_REQUIRE_SERVICES=1, as in CI)."""
    from llamaherd_docker.daemon import connect

    require_service("docker")
    try:
        client = connect()
    except SandboxError as exc:
        service_unavailable("docker", str(exc))
    for image in (DEBIAN_IMAGE, BUSYBOX_IMAGE):
        if not client.images.list(name=image):
            service_unavailable("docker", f"image {image} missing")
    return client


@pytest.fixture(scope="session")
def debian_image(docker_client: Any) -> str:
    """A local image whose default user is root (and that has no ``node`` user)."""
    return DEBIAN_IMAGE


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """``al-agent:latest`` built by the real ``al setup docker`` on the local Debian image."""
    done = subprocess.run(
        [str(AL), "setup", "docker", "--base-image", DEBIAN_IMAGE, "--tag", BASE_TAG],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Successfully tagged al-agent:latest" in done.stdout  # progress is shown
    return BASE_TAG


@pytest.fixture(scope="session")
def runtime(docker_client: Any) -> Any:
    from llamaherd_docker.runtime import ContainerRuntime

    return ContainerRuntime()


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A language-skill commands dir holding one command, ``al-hello``."""
    path = tmp_path_factory.mktemp("bin")
    script = path / "al-hello"
    script.write_text('#!/bin/sh\necho "hello from $AL_AGENT"\n')
    script.chmod(0o755)
    path.chmod(0o755)
    return path


@pytest.fixture
def project(tmp_project: Any, base_image: str) -> Any:
    """A project whose agent ``worker`` runs in the base image with small, fast limits."""
    tmp_project.config(f'[local]\nimage = "{base_image}"\nmemory = "256m"\ncpus = 1\n')
    tmp_project.add_agent(
        "worker",
        '[runtime]\nnetwork = "none"\npids = 64\ntmpSize = "32m"\nhomeSize = "8m"\n',
    )
    return tmp_project


def make_spec(
    project: Any,
    bin_dir: Path,
    agent: str = "worker",
    run_id: str | None = None,
    credentials: dict[str, dict[str, str]] | None = None,
    credential_env: Callable[[str], dict[str, str]] | None = None,
    gateway_socket: str | None = None,
) -> SandboxSpec:
    loaded = project.load()
    run_id = run_id or f"{agent}-{os.urandom(4).hex()}"
    return SandboxSpec(
        run_id=run_id,
        agent=loaded.agent(agent),
        project=loaded,
        credential_files=credential_files({}, credentials or {}),
        env={"AL_RUN_TOKEN": "token-" + run_id, "AL_GATEWAY_URL": "http://127.0.0.1:1"},
        bin_dir=bin_dir,
        timeout=60,
        credential_env=credential_env or (lambda root: {}),
        gateway_socket=gateway_socket,
    )


@pytest.fixture
def start(runtime: Any, project: Any, bin_dir: Path) -> Iterator[Callable[..., Any]]:
    """``start(**spec_kwargs)`` starts a sandbox of ``project``; all are removed afterwards."""
    started: list[Any] = []

    def run(**kwargs: Any) -> Any:
        target = kwargs.pop("project", project)
        sandbox = runtime.start(make_spec(target, bin_dir, **kwargs))
        started.append(sandbox)
        return sandbox

    yield run
    for sandbox in started:
        sandbox.cleanup()

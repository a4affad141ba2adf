"""The scheduler image (the repository's Dockerfile) builds on the local Docker daemon from the
local Debian base image, with no registry and no package index (wheels made here), and runs the
demo agent: in the foreground, and through the scheduler the image starts by default."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from llamaherd import testing_wheels as wheelhouse
from llamaherd.testing import require_service, service_unavailable, wait_until

pytestmark = pytest.mark.docker

BASE = "local/debian-python:bookworm"
ROOT = Path(__file__).resolve().parents[3]
PLUGINS = ["cron", "webhooks", "github", "docker", "host-user", "anthropic", "openai",
           "scripted", "dashboard", "deploy"]  # fmt: skip


def docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])}: {result.stdout}\n{result.stderr}")
    return result


def installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.fixture
def image(tmp_path: Path):
    # The project's image holds every first-party plugin: packed from the `tests` env.
    missing = [d for d in ("llamaherd", *(f"llamaherd-{p}" for p in PLUGINS)) if not installed(d)]
    if missing:
        pytest.skip(f"the image packs {', '.join(missing)}, not installed here")
    require_service("docker")
    if shutil.which("docker") is None or docker("image", "inspect", BASE, check=False).returncode:
        service_unavailable("docker", f"the docker command or the image {BASE} is missing")
    context = tmp_path / "context"
    context.mkdir()
    for name in ("Dockerfile", ".dockerignore"):
        shutil.copy(ROOT / name, context / name)
    ignore = shutil.ignore_patterns("tests", "__pycache__", "*.pyc", ".pytest_cache")
    shutil.copytree(ROOT / "core", context / "core", ignore=ignore)
    shutil.copytree(ROOT / "plugins", context / "plugins", ignore=ignore)
    # Every dependency, the build backend and pip itself, as wheels: the build needs no index.
    names = [f"llamaherd-{name}" for name in PLUGINS]
    wheelhouse.build(context / "wheelhouse", ["llamaherd", *names, "hatchling", "pip"],
                     {"llamaherd": {"postgres"}}, ours=False)  # fmt: skip
    tag = f"llamaherd-test:{secrets.token_hex(4)}"
    docker(
        "build", "--quiet", "--tag", tag,
        "--build-arg", f"BASE={BASE}",
        "--build-arg", "APT_PACKAGES=",
        "--build-arg", "PIP_OPTIONS=--no-index --find-links /src/wheelhouse",
        str(context),
        timeout=900,
    )  # fmt: skip
    try:
        yield tag
    finally:
        docker("rmi", "--force", tag, check=False)


def test_the_image_builds_offline_and_runs_the_demo_agent(image):
    demo = docker(
        "run", "--rm", "--init", "--entrypoint", "sh", image, "-c",
        "al new /tmp/demo && cd /tmp/demo && al validate && al run hello",
        timeout=180,
    )  # fmt: skip
    assert '"hello, world"' in demo.stdout and "done" in demo.stdout
    assert "hello from llamaherd" in demo.stdout  # the agent's `whoami`: the image's user
    plugins = docker("run", "--rm", image, "plugins").stdout
    for name in PLUGINS:
        assert name in plugins

    name = f"llamaherd-test-{secrets.token_hex(4)}"
    docker(
        "run", "--detach", "--init", "--name", name, "--entrypoint", "sh", image, "-c",
        "al new /project/demo >/dev/null && exec al --project /project/demo start --bind 0.0.0.0",
    )  # fmt: skip
    try:
        wait_until(
            lambda: "listening on" in docker("logs", name).stderr, 60, what="the scheduler up"
        )
        run = docker("exec", name, "al", "--project", "/project/demo", "run", "hello", timeout=120)
        assert '"hello, world"' in run.stdout
        runs = docker("exec", name, "al", "--project", "/project/demo", "runs").stdout
        assert "hello" in runs and "done" in runs
        docker("stop", "--time", "60", name, timeout=90)
        assert docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    finally:
        docker("rm", "--force", name, check=False)

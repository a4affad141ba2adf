"""`al doctor`'s docker check: the daemon, the base image and agents' images; `--fix` builds."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from .conftest import AL, DEBIAN_IMAGE

pytestmark = pytest.mark.docker


def _doctor(project, *args, env=None):
    import os

    return subprocess.run(
        [str(AL), "--project", str(project.root), "doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AL_DOCKER_BASE_IMAGE": DEBIAN_IMAGE, **(env or {})},
    )


def _findings(result):
    assert result.stdout, result.stderr
    return {
        f["subject"]: f for f in json.loads(result.stdout)["findings"] if f["check"] == "docker"
    }


@pytest.fixture
def base_tag(docker_client):
    """A base image name no other test uses, removed afterwards."""
    tag = f"al-doctor-{uuid.uuid4().hex[:8]}:latest"
    yield tag
    if docker_client.images.list(name=tag):
        docker_client.images.remove(tag)  # untag only: the same layers may be al-agent:latest


def test_a_missing_base_image_is_built_by_fix(tmp_project, docker_client, base_tag):
    tmp_project.config(f'[local]\nimage = "{base_tag}"\n[gateway]\nport = 0\n')
    tmp_project.add_agent("a", '[runtime]\ntype = "container"\n')
    result = _doctor(tmp_project, "--json")
    assert result.returncode == 1
    found = _findings(result)
    daemon = next(f for s, f in found.items() if s.startswith("Docker daemon"))
    assert daemon["status"] == "ok" and "answers (Docker" in daemon["message"]
    base = found[f"image {base_tag}"]
    assert base["status"] == "error" and "not found locally" in base["message"]
    assert base["fix"] == f"build {base_tag} from {DEBIAN_IMAGE} (as `al setup docker` does)"
    fixed = _doctor(tmp_project, "--fix", "--yes")
    assert f"built {base_tag} from {DEBIAN_IMAGE}" in fixed.stderr, fixed.stderr
    assert docker_client.images.list(name=base_tag)
    assert _findings(_doctor(tmp_project, "--json"))[f"image {base_tag}"]["status"] == "ok"


def test_an_agent_image_not_built_yet_is_built_by_fix(tmp_project, docker_client, base_image):
    name = f"doc{uuid.uuid4().hex[:6]}"
    tmp_project.config("[gateway]\nport = 0\n")
    agent = tmp_project.add_agent(name, '[runtime]\ntype = "container"\n')
    (agent / "Dockerfile").write_text(f"FROM al-agent:latest\nRUN echo {name} > /tmp/marker\n")
    try:
        result = _doctor(tmp_project, "--json")
        found = _findings(result)[f"agents/{name} image"]
        assert found["status"] == "warning" and "not built" in found["message"]
        assert found["fix"] == f"build it from agents/{name}/Dockerfile now"
        fixed = _doctor(tmp_project, "--fix", "--yes")
        assert f"built al-agent-{name}:" in fixed.stderr, fixed.stderr
        after = _findings(_doctor(tmp_project, "--json"))[f"agents/{name} image"]
        assert after["status"] == "ok"
    finally:
        for image in docker_client.images.list(name=f"al-agent-{name}"):
            for tag in image.tags:
                docker_client.images.remove(tag)


def test_no_daemon_is_an_error(tmp_project, tmp_path):
    tmp_project.config("[gateway]\nport = 0\n")
    tmp_project.add_agent("a", '[runtime]\ntype = "container"\n')
    result = _doctor(
        tmp_project, "--json", env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    )
    assert result.returncode == 1
    # The runtime's own validate says the same (the config check): it is shown once.
    (found,) = [
        f
        for f in json.loads(result.stdout)["findings"]
        if "Docker daemon not reachable" in f["message"]
    ]
    assert found["status"] == "error"

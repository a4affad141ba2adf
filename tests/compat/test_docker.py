"""On the real local Docker daemon: a project-level Dockerfile is the layer under every agent
image (``al start`` builds it ahead, with progress), and a corpus project runs a real agent in a
container offline once its model provider is swapped for the scripted one.

``al-agent:latest`` is built from the local Debian image as a user's ``al setup docker`` would
(no registry is reachable here)."""

from __future__ import annotations

from typing import Any

import pytest

from llamaherd.testing import TmpProject, wait_until

pytestmark = pytest.mark.docker


def output(docker: Any, image: str, command: str) -> str:
    return docker.containers.run(image, ["sh", "-c", command], remove=True).decode()


def test_the_project_dockerfile_is_the_base_of_every_agent_image(
    corpus, al, docker, built, scheduler
):
    from llamaherd_docker.runtime import ContainerRuntime

    from llamaherd.project import load_project

    root = corpus("project-dockerfile")
    built.append(root)
    checked = al("validate", cwd=root)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # `al start` builds the images itself before any run, and says so in its log.
    with (root / "config.toml").open("a") as fh:
        fh.write("\n[gateway]\nport = 0\n")
    sched = scheduler(
        TmpProject(root), env={"AL_CREDENTIALS_DIR": str(root.parent / "credentials")}
    )
    wait_until(lambda: "agent reviewer: ready" in sched.read_log(), 240, what="images built")
    log = sched.read_log()
    assert "agent dev: ready (al-project-project-dockerfile-" in log
    assert 'RUN echo "project layer" > /etc/al-project-marker' in log
    assert 'RUN echo "reviewer layer" > /etc/al-agent-marker' in log
    sched.stop()

    project = load_project(root)
    runtime = ContainerRuntime()
    lines: list[str] = []
    dev = runtime.prepare(project.agent("dev"), project, lines.append)
    reviewer = runtime.prepare(project.agent("reviewer"), project, lines.append)
    assert lines == []  # built by `al start`: nothing to rebuild
    assert dev.startswith("al-project-project-dockerfile-")  # no Dockerfile of its own
    assert output(docker, dev, "cat /etc/al-project-marker") == "project layer\n"
    assert output(docker, reviewer, "cat /etc/al-project-marker /etc/al-agent-marker; id -un") == (
        "project layer\nreviewer layer\nnode\n"
    )

    # A changed project Dockerfile rebuilds the project layer and the agents on top of it.
    text = (root / "Dockerfile").read_text().replace('"project layer"', '"project layer v2"')
    (root / "Dockerfile").write_text(text)
    reviewer_v2 = runtime.prepare(project.agent("reviewer"), project)
    assert reviewer_v2 != reviewer
    assert output(docker, reviewer_v2, "cat /etc/al-project-marker") == "project layer v2\n"


def test_a_corpus_project_runs_offline_after_swapping_only_the_provider(corpus, al, docker, built):
    root = corpus("project-keys")
    built.append(root)
    config = root / "config.toml"
    swapped = config.read_text().replace('provider = "anthropic"', 'provider = "scripted"')
    config.write_text(swapped.replace('provider = "openai"', 'provider = "scripted"'))
    result = al("run", "dev", "fix the flaky test", cwd=root, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done (exit 0)" in result.stdout
    assert "dev handled a manual trigger" in result.stdout

"""Agent images: Action Llama Dockerfiles build on our base, are cached, and fail clearly."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from llamaherd.api import SandboxError

pytestmark = pytest.mark.docker

AGENT_DOCKERFILE = """\
FROM al-agent:latest
USER root
RUN echo "built on $(id -un 1000)" > /opt/marker
COPY notes.txt /opt/notes.txt
USER node
"""


def test_agent_dockerfile_builds_on_the_base_image_and_is_cached(
    project: Any, runtime: Any, start: Any
) -> None:
    project.write("agents/worker/Dockerfile", AGENT_DOCKERFILE)
    project.write("agents/worker/notes.txt", "v1")
    project.write("agents/worker/.dockerignore", "scratch/\n")
    project.write("agents/worker/nonce", uuid.uuid4().hex)  # a build never seen before
    project.write("agents/worker/tests/case.toml", '[trigger]\nkind = "manual"\n')
    loaded = project.load()
    lines: list[str] = []
    tag = runtime.prepare(loaded.agent("worker"), loaded, lines.append)
    assert tag.startswith("al-agent-worker:")
    assert any("FROM al-agent:latest" in line for line in lines)  # progress is streamed

    lines.clear()
    project.write("agents/worker/scratch/tmp.txt", "ignored by .dockerignore")
    # The agent's test cases (al test), their cassettes and payloads are no part of its image.
    project.write("agents/worker/tests/case.toml", '[trigger]\nkind = "scheduled"\n')
    project.write("agents/worker/tests/case.cassette.json", "{}")
    assert runtime.prepare(loaded.agent("worker"), loaded, lines.append) == tag
    assert lines == []  # unchanged context: no rebuild

    box = start()
    assert box.exec("cat /opt/marker /opt/notes.txt; id -un").output == "built on node\nv1node\n"
    box.cleanup()  # an image still used by a container is not untagged

    project.write("agents/worker/notes.txt", "v2")
    retagged = runtime.prepare(loaded.agent("worker"), loaded)
    assert retagged != tag and retagged.startswith("al-agent-worker:")
    # Listed by repository: an unfiltered list races with other tests removing their images.
    listed = runtime.client().images.list(name="al-agent-worker")
    assert tag not in {t for image in listed for t in image.tags}


def test_from_al_agent_follows_the_project_image(
    tmp_project: Any, runtime: Any, debian_image: str
) -> None:
    # A project whose [local].image is not al-agent:latest: FROM al-agent:latest means it.
    tmp_project.config(f'[local]\nimage = "{debian_image}"\n')
    tmp_project.add_agent("custom", "")
    tmp_project.write(
        "agents/custom/Dockerfile", f"FROM al-agent\nRUN test ! -e /home/node # {uuid.uuid4()}\n"
    )
    loaded = tmp_project.load()
    lines: list[str] = []
    runtime.prepare(loaded.agent("custom"), loaded, lines.append)
    assert any(f"FROM {debian_image}" in line for line in lines)


def test_build_failure_names_the_dockerfile_and_the_last_line(project: Any, runtime: Any) -> None:
    project.add_agent("broken", "")
    project.write("agents/broken/Dockerfile", "FROM al-agent:latest\nRUN echo nope; exit 3\n")
    loaded = project.load()
    with pytest.raises(SandboxError) as failed:
        runtime.prepare(loaded.agent("broken"), loaded)
    message = str(failed.value)
    assert message.startswith("agents/broken/Dockerfile: image build failed: ")
    assert "returned a non-zero code: 3" in message and "\n" not in message


def test_missing_base_image_is_a_clear_error(tmp_project: Any, runtime: Any) -> None:
    tmp_project.config('[local]\nimage = "al-agent:never-built"\n')
    tmp_project.add_agent("plain", "")
    tmp_project.add_agent("built", "")
    tmp_project.write("agents/built/Dockerfile", "FROM al-agent:latest\n")
    loaded = tmp_project.load()
    with pytest.raises(SandboxError, match=r"^image al-agent:never-built not found locally: "):
        runtime.prepare(loaded.agent("plain"), loaded)
    with pytest.raises(SandboxError, match=r"^image al-agent:never-built not found locally: "):
        runtime.prepare(loaded.agent("built"), loaded)
    assert runtime.validate(loaded.agent("plain"), loaded) == [  # the environment: a warning
        "warning: image al-agent:never-built not found locally: build it with `al setup docker` "
        "(or `docker pull al-agent:never-built` and set [local].image)"
    ]


def test_setup_docker_gives_a_node_user_and_python(base_image: str, docker_client: Any) -> None:
    out = docker_client.containers.run(
        base_image, ["sh", "-c", "id; echo $HOME; python3 -c 'print(1)'"], remove=True
    )
    assert out.decode().splitlines() == [
        "uid=1000(node) gid=1000(node) groups=1000(node)",
        "/home/node",
        "1",
    ]

"""Images: the base image (``al setup docker``), the project's, and one image per agent.

Layers, as in Action Llama: ``[local].image`` (default ``al-agent:latest``), then the project
image built from a ``Dockerfile`` at the project root (when it holds more than its ``FROM``
line), then an agent's image built from its own ``Dockerfile``. An agent without one runs in the
project image, else in ``[local].image``. Dockerfiles written for Action Llama say ``FROM
al-agent:latest``: that line is rewritten to the layer below.

Images are tagged by content: ``al-agent-<name>:<digest>`` covers the agent's build context
(honouring ``.dockerignore``) and the base image's id; ``al-project-<dir>-<hash>:<digest>``
covers the project Dockerfile and its base's id. So nothing unchanged is rebuilt, and a rebuilt
lower layer rebuilds what is on top. The project Dockerfile is built without a context (Action
Llama builds it from its own package): ``RUN``/``ENV`` work, ``COPY`` of project files does not.
Nothing is ever pulled except the ``FROM`` image of a base built by ``build_base``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from llamaherd.api import SandboxError
from llamaherd_docker.daemon import docker_errors

Progress = Callable[[str], None]

# The name Action Llama agent Dockerfiles build on.
AL_BASE = "al-agent:latest"
# What `al setup docker` (and `al start`, for a missing al-agent:latest) builds the base from:
# Action Llama's agents expect Node and Alpine's `apk`.
DEFAULT_BASE_IMAGE = "node:20-alpine"
BASE_IMAGE_ENV = "AL_DOCKER_BASE_IMAGE"  # overrides it (a mirror, a machine without a registry)
# The project-level Dockerfile, at the project root.
PROJECT_DOCKERFILE = "Dockerfile"
# Written into the build context beside the agent's own Dockerfile, with FROM rewritten.
BUILD_DOCKERFILE = ".llamaherd.Dockerfile"
DIGEST_LENGTH = 16

_FROM_AL_BASE = re.compile(
    r"^(\s*FROM\s+(?:--\S+\s+)*)al-agent(?::latest)?(?=\s|$)", re.IGNORECASE | re.MULTILINE
)
_NOT_TAG_CHARS = re.compile(r"[^a-z0-9_.-]+")

# The project base image: keeps Action Llama agent Dockerfiles working (`USER node`, uid 1000,
# python3 for the in-sandbox commands). Users are appended to /etc/passwd directly because the
# tools to add them differ between Alpine (busybox adduser) and Debian (useradd).
BASE_DOCKERFILE = """\
FROM {base}
USER root
RUN set -e; \\
    if ! command -v python3 >/dev/null 2>&1; then \\
      if command -v apk >/dev/null 2>&1; then apk add --no-cache python3; \\
      elif command -v apt-get >/dev/null 2>&1; then \\
        apt-get update && apt-get install -y --no-install-recommends python3 \\
        && rm -rf /var/lib/apt/lists/*; \\
      else echo "python3 is missing and neither apk nor apt-get can install it" >&2; exit 1; fi; \\
    fi; \\
    grep -q '^node:' /etc/group || echo 'node:x:1000:' >>/etc/group; \\
    grep -q '^node:' /etc/passwd || echo 'node:x:1000:1000:node:/home/node:/bin/sh' >>/etc/passwd; \\
    mkdir -p /home/node /app/bin /credentials /run/al-gateway; \\
    chown 1000:1000 /home/node
ENV HOME=/home/node
WORKDIR /home/node
USER node
"""


def default_base_image() -> str:
    """What the base image is built from when none is named: ``$AL_DOCKER_BASE_IMAGE``, else
    ``DEFAULT_BASE_IMAGE``."""
    return os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE


def base_dockerfile(base_image: str) -> str:
    return BASE_DOCKERFILE.format(base=base_image)


def rewrite_from(dockerfile: str, base_image: str) -> str:
    """Point ``FROM al-agent[:latest]`` at the project's base image."""
    return _FROM_AL_BASE.sub(lambda m: m.group(1) + base_image, dockerfile)


def uses_base(dockerfile: str, base_image: str) -> bool:
    """Whether a (rewritten) Dockerfile builds FROM ``base_image``."""
    pattern = rf"^\s*FROM\s+(?:--\S+\s+)*{re.escape(base_image)}(?=\s|$)"
    return re.search(pattern, dockerfile, re.IGNORECASE | re.MULTILINE) is not None


def _slug(name: str, fallback: str) -> str:
    return _NOT_TAG_CHARS.sub("-", name.lower()).strip("-._") or fallback


def agent_repository(name: str) -> str:
    """``al-agent-<name>``, made a valid image repository name."""
    return "al-agent-" + _slug(name, "agent")


def project_repository(root: Path) -> str:
    """``al-project-<dir>-<hash of its path>``: one per project directory on the daemon."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:6]
    return f"al-project-{_slug(root.name, 'project')}-{digest}"


def customized(dockerfile: str) -> bool:
    """Whether a Dockerfile does more than name its base (a bare ``FROM`` adds no layer)."""
    lines = [line.strip() for line in dockerfile.splitlines()]
    steps = [line for line in lines if line and not line.startswith("#")]
    return any(not step.upper().startswith("FROM") for step in steps)


def project_text(path: Path) -> str:
    """A Dockerfile or ``.dockerignore`` of the project, read as core reads every project file:
    a regular file, size-capped (a FIFO or a link to /dev/zero is refused, not read)."""
    from llamaherd.api import read_project_text

    return read_project_text(path)


# An agent's test cases, their cassettes and payloads (``al test``) never go into its image:
# recording a case must not rebuild it. Last, so that no pattern of .dockerignore brings
# them back.
TEST_FILES = ("tests/*.toml", "tests/*.json")


def ignore_patterns(root: Path) -> list[str]:
    """The patterns of ``root/.dockerignore`` (none when it is absent), then ``TEST_FILES``."""
    ignore = root / ".dockerignore"
    if not ignore.is_file():
        return list(TEST_FILES)
    lines = (line.strip() for line in project_text(ignore).splitlines())
    return [line for line in lines if line and not line.startswith("#")] + list(TEST_FILES)


def context_files(root: Path) -> list[str]:
    """Files of the build context, relative to ``root``, as ``docker build`` would send them."""
    from docker.utils.build import exclude_paths

    return sorted(exclude_paths(str(root), ignore_patterns(root)))


def context_digest(root: Path, files: Iterable[str], dockerfile: str, base_id: str) -> str:
    """Digest of what a build depends on: file names, modes and contents, Dockerfile, base."""
    digest = hashlib.sha256()
    digest.update(f"{base_id}\0{dockerfile}\0".encode())
    for name in files:
        path = root / name
        if path.is_symlink():
            digest.update(f"{name}\0link\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"{name}\0{path.stat().st_mode & 0o777:o}\0".encode())
            with path.open("rb") as fh:  # streamed: a context file may be large
                digest.update(hashlib.file_digest(fh, "sha256").digest())
        else:
            digest.update(f"{name}\0dir\0".encode())
    return digest.hexdigest()[:DIGEST_LENGTH]


def build(
    client: Any,
    what: str,
    tag: str,
    progress: Progress | None = None,
    labels: dict[str, str] | None = None,
    **context: Any,
) -> None:
    """Build ``tag`` (never pulling), streaming log lines to ``progress``.

    ``context`` is the SDK's: ``fileobj=`` (a Dockerfile or, with ``custom_context=True``, a tar)
    and ``dockerfile=``. Failure raises ``SandboxError("<what>: image build failed: <line>")``
    with the last line the build printed.
    """
    last = "no output"
    with docker_errors(f"{what}: image build failed"):
        stream = client.api.build(
            tag=tag, pull=False, rm=True, forcerm=True, decode=True, labels=labels, **context
        )
        for chunk in stream:
            if "error" in chunk:
                last = (chunk["error"].strip().splitlines() or [last])[-1]
                raise SandboxError(f"{what}: image build failed: {last}")
            for line in str(chunk.get("stream") or chunk.get("status") or "").splitlines():
                if line.strip():
                    last = line.strip()
                    if progress:
                        progress(line.rstrip())


def build_base(
    client: Any, base_image: str, tag: str = AL_BASE, progress: Progress | None = None
) -> None:
    """Build the project base image ``tag`` from ``base_image`` (``al setup docker``)."""
    dockerfile = io.BytesIO(base_dockerfile(base_image).encode())
    build(client, "al setup docker", tag, progress, {"llamaherd.base": "1"}, fileobj=dockerfile)


def _base_id(client: Any, dockerfile: str, base_image: str, what: str) -> str:
    """The id of the image a (rewritten) Dockerfile builds on; "" when it builds on another."""
    from docker.errors import ImageNotFound

    with docker_errors(what):
        try:
            return str(client.images.get(base_image).id)
        except ImageNotFound:
            if uses_base(dockerfile, base_image):
                raise SandboxError(
                    f"{what}: image build failed: base image {base_image} not found locally; "
                    "build it with `al setup docker`"
                ) from None
            return ""


def build_project(
    client: Any,
    root: Path,
    base_image: str,
    progress: Progress | None = None,
    labels: dict[str, str] | None = None,
) -> str | None:
    """The project image built from ``root/Dockerfile`` on ``base_image`` (unless an identical
    one exists); None when there is no project Dockerfile or it is a bare ``FROM``."""
    path = root / PROJECT_DOCKERFILE
    if not path.is_file():
        return None
    dockerfile = rewrite_from(project_text(path), base_image)
    if not customized(dockerfile):
        return None
    what = PROJECT_DOCKERFILE
    base_id = _base_id(client, dockerfile, base_image, what)
    digest = hashlib.sha256(f"{base_id}\0{dockerfile}".encode()).hexdigest()[:DIGEST_LENGTH]
    repository = project_repository(root)
    tag = f"{repository}:{digest}"
    if not image_exists(client, tag, what):
        build(client, what, tag, progress, labels, fileobj=io.BytesIO(dockerfile.encode()))
        remove_stale(client, repository, keep=tag)
    return tag


def build_agent(
    client: Any,
    agent_dir: Path,
    what: str,
    base_image: str,
    progress: Progress | None = None,
    labels: dict[str, str] | None = None,
) -> str:
    """The image tag for an agent with a Dockerfile, built unless an identical one exists."""
    from docker.utils.build import tar

    tag, dockerfile = agent_image(client, agent_dir, what, base_image)
    if image_exists(client, tag, what):
        return tag
    repository = tag.rpartition(":")[0]
    extra = (BUILD_DOCKERFILE, dockerfile)
    with tar(str(agent_dir), exclude=ignore_patterns(agent_dir), dockerfile=extra) as context:
        build(
            client,
            what,
            tag,
            progress,
            labels,
            fileobj=context,
            custom_context=True,
            dockerfile=BUILD_DOCKERFILE,
        )
    remove_stale(client, repository, keep=tag)
    return tag


def agent_image(client: Any, agent_dir: Path, what: str, base_image: str) -> tuple[str, str]:
    """The tag an agent's image has for its build context as it is now, and its Dockerfile
    with ``FROM`` rewritten (SandboxError when the base image it builds on is missing)."""

    dockerfile = rewrite_from(project_text(agent_dir / "Dockerfile"), base_image)
    base_id = _base_id(client, dockerfile, base_image, what)
    files = context_files(agent_dir)
    repository = agent_repository(agent_dir.name)
    return f"{repository}:{context_digest(agent_dir, files, dockerfile, base_id)}", dockerfile


def image_exists(client: Any, tag: str, what: str) -> bool:
    from docker.errors import ImageNotFound

    with docker_errors(what):
        try:
            client.images.get(tag)
        except ImageNotFound:
            return False
    return True


def remove_stale(client: Any, repository: str, keep: str) -> None:
    """Untag an agent's earlier builds; images still used by a container are left alone."""
    from docker.errors import APIError

    for image in client.images.list(name=repository):
        for tag in image.tags:
            if tag.startswith(f"{repository}:") and tag != keep:
                try:
                    client.images.remove(tag)
                except APIError:
                    pass


def _image_file(client: Any, image: str, path: str) -> str:
    """A text file of an image, read from a created (never started) container."""
    import tarfile  # late, as docker: `al --help` loads this module

    from docker.errors import NotFound

    container = client.api.create_container(image, command=["/bin/sh"])["Id"]
    try:
        stream, _stat = client.api.get_archive(container, path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            member = archive.next()
            extracted = archive.extractfile(member) if member else None
            return extracted.read().decode(errors="replace") if extracted else ""
    except NotFound:
        return ""
    finally:
        client.api.remove_container(container, force=True)


def _table(text: str) -> dict[str, list[str]]:
    """``name -> fields`` of a passwd or group file, also keyed by the numeric id."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) > 3 and fields[2].isdigit():
            rows[fields[0]] = rows[fields[2]] = fields
    return rows


def image_user(client: Any, image: str, user: str) -> tuple[int, int]:
    """Numeric (uid, gid) of an image's ``USER`` (``name``, ``uid``, ``name:group``, ...).

    Names are looked up in the image's own /etc/passwd and /etc/group; root when unset.
    """
    name, _, group = (user or "root").partition(":")
    if name.isdigit() and group.isdigit():
        return int(name), int(group)
    with docker_errors(f"image {image}"):
        passwd = _table(_image_file(client, image, "/etc/passwd"))
        groups = _table(_image_file(client, image, "/etc/group")) if group else {}
    entry = passwd.get(name)
    if entry is None and not name.isdigit():
        raise SandboxError(f"image {image}: USER {name} is not in its /etc/passwd")
    uid = int(name) if name.isdigit() else int(entry[2])  # type: ignore[index]
    if not group:
        return uid, int(entry[3]) if entry else 0
    if group.isdigit():
        return uid, int(group)
    if group not in groups:
        raise SandboxError(f"image {image}: group {group} is not in its /etc/group")
    return uid, int(groups[group][2])

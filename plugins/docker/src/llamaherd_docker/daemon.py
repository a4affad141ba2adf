"""The connection to the Docker daemon, and turning its errors into one clear line.

The ``docker`` SDK is imported inside functions: importing it costs ~0.1 s, and ``al --help``
or a host-user-only project must not pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llamaherd.api import SandboxError

DEFAULT_HOST = "unix:///var/run/docker.sock"
# Connections kept per client: every running exec streams over its own connection.
POOL_SIZE = 64


def docker_host() -> str:
    """Where the SDK will look for the daemon (``DOCKER_HOST`` or the default socket)."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def unreachable(host: str | None = None) -> SandboxError:
    return SandboxError(
        f"Docker daemon not reachable at {host or docker_host()}: "
        'start dockerd or use [runtime] type = "host-user"'
    )


def connect() -> Any:
    """A ``docker.DockerClient`` for ``DOCKER_HOST``; SandboxError when the daemon is down."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(max_pool_size=POOL_SIZE)
        client.ping()
    except DockerException:
        raise unreachable() from None
    return client


@contextmanager
def docker_errors(what: str, where: str | None = None) -> Iterator[None]:
    """Re-raise the SDK's errors inside the block as ``SandboxError("<what>: <reason>")``;
    ``where`` names the engine in a lost connection's message."""
    from docker.errors import APIError, DockerException
    from requests.exceptions import ConnectionError as RequestsConnectionError

    try:
        yield
    except APIError as exc:
        reason = exc.explanation or str(exc)
        raise SandboxError(f"{what}: {reason}") from None
    except (RequestsConnectionError, DockerException):
        raise unreachable(where) from None

"""System services a test needs and a machine may lack: one way to say so.

A test that needs a Docker daemon, PostgreSQL, Chromium, an OpenSSH server, root, a writable
cgroup2 hierarchy or the OpenSSH client carries the service's marker (``@pytest.mark.docker``,
``postgres``, ``browser``, ``sshd``, ``root``, ``cgroup2``, ``ssh_client``) or calls
``require_service(name)`` from a fixture; a fixture that finds a service up but unusable (an
image missing) calls ``service_unavailable(name, why)``. Where the service is missing the test
is skipped with one line naming it and the command that brings it up, and the run's summary
counts the skips per service (``pytest_terminal_summary``). With ``AL_REQUIRE_SERVICES=1``
(CI exports it, in ``.ci/run``) each such skip is a failure instead: nothing is hidden there.

The README lists the services and their commands (``SERVICES`` is the list).
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

import pytest

REQUIRE_ENV = "AL_REQUIRE_SERVICES"
CHROMIUM_ENV = "AL_TEST_CHROMIUM"  # where Chromium is, when not /usr/bin/chromium
SSHD_ENV = "AL_TEST_SSHD"  # where sshd is, when not /usr/sbin/sshd


@dataclass(frozen=True)
class Service:
    """A system service: what it is (``label``), the command that brings it up, and a probe
    saying why it is not usable here (None: it is)."""

    label: str
    bring_up: str
    probe: Callable[[], str | None]


def chromium_path() -> Path:
    """Debian's Chromium, or the one ``AL_TEST_CHROMIUM`` names."""
    return Path(os.environ.get(CHROMIUM_ENV) or "/usr/bin/chromium")


def sshd_path() -> Path:
    """OpenSSH's server, or the one ``AL_TEST_SSHD`` names."""
    return Path(os.environ.get(SSHD_ENV) or "/usr/sbin/sshd")


def _docker() -> str | None:
    """Whether the Docker daemon ``DOCKER_HOST`` (default: the local socket) answers a ping."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    url = urlparse(host)
    try:
        if url.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(5)
            sock.connect(url.path)
        elif url.scheme == "tcp":
            sock = socket.create_connection((url.hostname or "", url.port or 2375), timeout=5)
        else:
            return None  # ssh:// and the like: the docker client finds out
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(4096)
    except OSError as exc:
        return f"no Docker daemon answers at {host} ({exc.strerror or exc})"
    if not answer.startswith(b"HTTP/1.") or b" 200 " not in answer.split(b"\r\n", 1)[0]:
        return f"the Docker daemon at {host} does not answer its ping"
    return None


def _postgres() -> str | None:
    if not os.environ.get("AL_TEST_POSTGRES_URL"):
        return "AL_TEST_POSTGRES_URL is not set"
    return None


def _browser() -> str | None:
    path = chromium_path()
    if not path.is_file():
        return f"no Chromium at {path}"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "Playwright is not installed"
    return None


def _sshd() -> str | None:
    path = sshd_path()
    return None if path.is_file() else f"no sshd at {path}"


def _root() -> str | None:
    return None if os.geteuid() == 0 else f"running as uid {os.geteuid()}, not root"


def _cgroup2() -> str | None:
    root = Path("/sys/fs/cgroup")
    if not (root / "cgroup.controllers").is_file():
        return "no cgroup2 hierarchy at /sys/fs/cgroup"
    return None if os.access(root, os.W_OK) else "/sys/fs/cgroup is not writable"


def _ssh_client() -> str | None:
    return None if shutil.which("ssh-keygen") else "ssh-keygen is not on PATH"


SERVICES: dict[str, Service] = {
    "docker": Service("a Docker daemon with the local images", "bash .ci/docker.sh", _docker),
    "postgres": Service(
        "PostgreSQL",
        "export AL_TEST_POSTGRES_URL=$(bash .ci/postgres.sh | tail -n1)",
        _postgres,
    ),
    "browser": Service("Chromium (and Playwright)", "apt-get install chromium", _browser),
    "sshd": Service("an OpenSSH server", "apt-get install openssh-server", _sshd),
    "root": Service("root", "run the tests as root", _root),
    "cgroup2": Service(
        "a writable cgroup2 hierarchy",
        "run the tests as root on a host with cgroup v2",
        _cgroup2,
    ),
    "ssh_client": Service("the OpenSSH client", "apt-get install openssh-client", _ssh_client),
}


@functools.cache
def service_problem(name: str) -> str | None:
    """Why service ``name`` is not usable here, or None; asked once per process."""
    return SERVICES[name].probe()


def skip_reason(name: str, why: str) -> str:
    """The one line a test skipped for want of ``name`` gives: what, why, the command."""
    service = SERVICES[name]
    return f"needs {service.label} ({why}): {service.bring_up}"


def service_unavailable(name: str, why: str) -> NoReturn:
    """Skip the test for want of service ``name`` (``why``: what is missing); fail it under
    ``AL_REQUIRE_SERVICES=1``."""
    reason = skip_reason(name, why)
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set: a missing service fails)", pytrace=False)
    pytest.skip(reason)


def require_service(name: str) -> None:
    """Go on only where service ``name`` is usable (else ``service_unavailable``)."""
    problem = service_problem(name)
    if problem is not None:
        service_unavailable(name, problem)


# ---------------------------------------------------------------------- pytest hooks


def pytest_configure(config: pytest.Config) -> None:
    for name, service in SERVICES.items():
        config.addinivalue_line("markers", f"{name}: needs {service.label} ({service.bring_up})")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked with a service is skipped (or failed) before its fixtures are set up
    where the service is missing."""
    for mark in item.iter_markers():
        if mark.name in SERVICES:
            require_service(mark.name)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many tests each missing service skipped, with the command that brings it up."""
    counts: dict[str, dict[str, int]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        text = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
        for name, service in SERVICES.items():
            if f"needs {service.label} (" in text:
                why = text.split(f"needs {service.label} (", 1)[1].rsplit("): ", 1)[0]
                counts.setdefault(name, {})
                counts[name][why] = counts[name].get(why, 0) + 1
                break
    if not counts:
        return
    terminalreporter.section("tests skipped for want of a system service")
    for name, whys in counts.items():
        service = SERVICES[name]
        total = sum(whys.values())
        terminalreporter.line(
            f"{total} skipped: {service.label} ({'; '.join(whys)}): {service.bring_up}"
        )
    terminalreporter.line(f"({REQUIRE_ENV}=1 makes each such skip a failure, as in CI)")

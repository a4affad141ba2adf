"""llamaherd reaches into uvicorn: ``http_guard.GuardedProtocol`` subclasses its private
``HttpToolsProtocol`` and ``server.py`` replaces its ``Server.main_loop``/``shutdown``. Those
are not uvicorn's public API, so core pins the range it was tested with; this test fails loudly
when the installed uvicorn is outside that range or the pieces we use moved."""

from __future__ import annotations

import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

PYPROJECT = Path(__file__).parents[2] / "core" / "pyproject.toml"
# What GuardedProtocol overrides or calls on HttpToolsProtocol, and QuietServer on Server.
PROTOCOL = (
    "connection_made", "connection_lost", "data_received", "on_message_begin", "on_url",
    "on_header", "on_headers_complete", "on_body", "on_message_complete", "send_400_response",
    "on_response_complete", "_unset_keepalive_if_required", "_should_upgrade",
    "handle_websocket_upgrade", "_unsupported_upgrade_warning",
)  # fmt: skip
# What GuardedProtocol reads or sets on a request's RequestResponseCycle.
CYCLE = (
    "keep_alive", "disconnected", "message_event", "response_started", "response_complete",
    "more_body", "body",
)  # fmt: skip
SERVER = ("main_loop", "on_tick", "shutdown", "startup", "serve")
MOVED = (
    "uvicorn {found} moved what llamaherd.http_guard / llamaherd.server build on ({what}): "
    "adapt them, run tests/security/test_http_limits.py, then widen the pin in core/pyproject.toml"
)


def _pin() -> tuple[tuple[int, ...], tuple[int, ...]]:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("uvicorn"))
    low, high = re.fullmatch(r"uvicorn>=([\d.]+),<([\d.]+)", spec).groups()
    return _version(low), _version(high)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_installed_uvicorn_is_in_the_tested_range():
    low, high = _pin()
    found = version("uvicorn")
    assert low <= _version(found) < high, (
        f"uvicorn {found} is outside the range llamaherd was tested with "
        f"(>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}, core/pyproject.toml): "
        "http_guard subclasses its private HttpToolsProtocol"
    )


def test_the_private_pieces_we_build_on_are_where_we_expect():
    import uvicorn
    from uvicorn.protocols.http import httptools_impl

    found = version("uvicorn")
    protocol = getattr(httptools_impl, "HttpToolsProtocol", None)
    assert protocol is not None, MOVED.format(found=found, what="HttpToolsProtocol")
    missing = [name for name in PROTOCOL if not callable(getattr(protocol, name, None))]
    assert not missing, MOVED.format(found=found, what=", ".join(missing))
    missing = [name for name in SERVER if not inspect.iscoroutinefunction(
        getattr(uvicorn.Server, name, None))]  # fmt: skip
    assert not missing, MOVED.format(found=found, what="Server." + ", Server.".join(missing))

    cycle = inspect.getsource(httptools_impl.RequestResponseCycle.__init__)
    missing = [name for name in CYCLE if f"self.{name} =" not in cycle]
    assert not missing, MOVED.format(found=found, what="RequestResponseCycle." + ", ".join(missing))

    from llamaherd.http_guard import GuardedProtocol

    assert issubclass(GuardedProtocol, protocol)

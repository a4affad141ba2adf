"""The CLI's client for a scheduler's control API: the local one, or a remote one through a
plugin's channel (``al stat --env NAME``).

Plain ``http.client``: the same few lines speak to a TCP address and to a unix socket (the
local end of an SSH forward), and ``al --help`` does not pay for importing ``requests``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llamaherd.auth import control_token
from llamaherd.local import scheduler_info
from llamaherd.types import CommandFailed, ControlChannel, LlamaherdError

TIMEOUT = 30.0
MAX_RESPONSE = 64 * 1024 * 1024  # a response larger than this is not a control answer


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (the ``Host`` header says ``localhost``)."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class ControlClient:
    """Talks to one scheduler's control API with its control token.

    ``find(project)`` gives the project's local scheduler (``None`` when none runs);
    ``for_environment(name)`` the scheduler a plugin reaches for ``--env NAME``. ``close()``
    ends a remote channel; the client is also a context manager.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        pid: int | None = None,
        socket_path: str | None = None,
        channel: ControlChannel | None = None,
    ):
        self.url = url
        self.pid = pid
        self.token = token
        self.socket_path = socket_path
        self.channel = channel
        self._conn: http.client.HTTPConnection | None = None

    @classmethod
    def find(cls, project: Any) -> ControlClient | None:
        return cls.of_state_dir(project.state_dir)

    @classmethod
    def of_state_dir(cls, state_dir: Path) -> ControlClient | None:
        """The scheduler of the project whose ``.al`` is ``state_dir``, over its unix socket
        when it has one (no TCP handshake), else its URL; None when none runs."""
        info = scheduler_info(state_dir)
        if not info:
            return None
        socket_path = info.get("socket")
        if socket_path and not os.path.exists(socket_path):
            socket_path = None
        return cls(info["url"], control_token(state_dir), pid=info["pid"], socket_path=socket_path)

    @classmethod
    def for_environment(cls, binding: Any) -> ControlClient | None:
        """The client of the scheduler deployed as ``binding.name`` (an ``environments.Binding``
        or a name), through the first plugin that knows it (hook ``open_control_channel``);
        None when its environment file has no ``[server]``: it only layers config over the
        project, and the command acts here."""
        from llamaherd.environments import (
            Binding,
            environment_file,
            is_deployed_file,
            read_environment,
        )

        if isinstance(binding, str):
            binding = Binding(binding, "--env")
        known = environment_file(binding.name).is_file()
        if known and not is_deployed_file(binding.name):
            return None
        channel = open_channel(binding.name, binding.said)
        if channel is None:  # no plugin knows it: say where environments are looked for
            read_environment(binding)
            raise LlamaherdError(f"{binding.said}: no plugin reaches its server")
        return cls(channel.where, channel.token, socket_path=channel.socket, channel=channel)

    # ------------------------------------------------------------------ requests
    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        # One retry on a fresh connection: the server may have closed an idle keep-alive one.
        failures: list[str] = []
        for attempt in (1, 2):
            try:
                status, data = self._exchange(method, path, payload, headers)
                break
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                self.socket_path = None  # the retry goes over TCP: the socket is a shortcut
                failures.append(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                if attempt == 2 or isinstance(exc, TimeoutError):
                    raise CommandFailed(
                        f"scheduler at {self.url} did not answer: {'; then '.join(failures)}"
                    ) from None
        try:
            answer = json.loads(data)
        except ValueError:
            answer = {"error": data[:200].decode(errors="replace")}
        if status >= 400:
            error = answer.get("error") if isinstance(answer, dict) else None
            # 400/404: the request was wrong (a usage error, exit 2); the state refused it
            # (409), the token was refused (401/403) or the scheduler failed (5xx): exit 1.
            failed = LlamaherdError if status in (400, 404, 413, 422) else CommandFailed
            raise failed(error or f"scheduler answered HTTP {status}")
        return answer

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.request("POST", path, body or {})

    def _exchange(
        self, method: str, path: str, payload: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        conn = self._connection()
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_RESPONSE + 1)
        if len(data) > MAX_RESPONSE:
            self._drop()
            raise http.client.HTTPException("response too large")
        if response.will_close:
            self._drop()
        return response.status, data

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.socket_path:
                self._conn = _UnixConnection(self.socket_path, TIMEOUT)
            else:
                parts = urlsplit(self.url)
                self._conn = http.client.HTTPConnection(
                    parts.hostname or "127.0.0.1", parts.port, timeout=TIMEOUT
                )
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self._drop()
        if self.channel is not None:
            channel, self.channel = self.channel, None
            channel.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_channel(environment: str, said: str | None = None) -> ControlChannel | None:
    """Ask the plugins for a channel to ``environment``'s scheduler (``said``: how the user
    named it, for the messages; default ``--env NAME``); None when none knows it."""
    from llamaherd.plugins import PROVIDED_BY, get_manager

    said = said or f"--env {environment}"
    hook = get_manager().hook.open_control_channel
    if not hook.get_hookimpls():
        dist = PROVIDED_BY[("hooks", "open_control_channel")]
        raise LlamaherdError(
            f"{said}: reaching a deployed scheduler needs a plugin such as {dist} "
            f"(pip install {dist})"
        )
    try:
        channel = hook(environment=environment)
    except LlamaherdError:
        raise
    except Exception as exc:  # a plugin's bug: one line, not a traceback
        raise CommandFailed(
            f"{said}: a plugin failed to open the channel: {type(exc).__name__}: {exc}"
        ) from None
    return channel

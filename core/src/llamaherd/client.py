"""The CLI's client for a scheduler's control API: the local one, or a remote one through a
plugin's channel (``al stat --env NAME``).

HTTP/1.1 over a plain socket, TCP or unix (the local end of an SSH forward): one request and
its whole answer at a time on a kept-alive connection. Not ``http.client``, which imports
``ssl`` and ``email`` (a tenth of what `al stat` costs), nor ``requests``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

from llamaherd.auth import control_token
from llamaherd.errors import CommandFailed, LlamaherdError
from llamaherd.local import scheduler_info

if TYPE_CHECKING:
    from llamaherd.types import ControlChannel

TIMEOUT = 30.0
MAX_RESPONSE = 64 * 1024 * 1024  # a response larger than this is not a control answer
MAX_LINE = 64 * 1024  # a status or header line longer than this is not HTTP from a scheduler
MAX_HEADERS = 100


class BadResponse(ConnectionError):
    """The other end answered something that is not an HTTP response we can read."""


class Connection:
    """One kept-alive HTTP/1.1 connection to ``address`` (a unix socket's path, or
    ``(host, port)``), opened on first use."""

    def __init__(self, address: str | tuple[str, int], timeout: float = TIMEOUT):
        self.address = address
        self.timeout = timeout
        if isinstance(address, str):
            self.host = "localhost"
        else:
            host, port = address
            self.host = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None

    def exchange(
        self, method: str, path: str, payload: bytes | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """Send a request; its answer's status and whole body."""
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(payload or b'')}")
        if any("\r" in line or "\n" in line for line in lines):  # never a second request
            raise ValueError(f"a line break in the request to {path!r}")
        sock, reader = self._open()
        sock.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (payload or b""))
        version, status, fields = _read_head(reader)
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            body = _read_chunked(reader)
        elif "content-length" in fields:
            body = _read_exactly(reader, _length(fields["content-length"]))
        else:  # the body runs to the end of the connection
            body = reader.read(MAX_RESPONSE + 1)
            fields["connection"] = "close"
        if len(body) > MAX_RESPONSE:
            raise BadResponse("response too large")
        tokens = {token.strip() for token in fields.get("connection", "").lower().split(",")}
        if "close" in tokens or (version == "HTTP/1.0" and "keep-alive" not in tokens):
            self.close()
        return status, body

    def _open(self) -> tuple[socket.socket, BinaryIO]:
        if self._sock is None or self._reader is None:
            if isinstance(self.address, str):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.address)
                except OSError:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(self.address, self.timeout)
            self._sock, self._reader = sock, sock.makefile("rb")
        return self._sock, self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._sock is not None:
            self._sock.close()
        self._sock = self._reader = None


def _line(reader: BinaryIO) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise BadResponse("header line too long")
    return line


def _read_head(reader: BinaryIO) -> tuple[str, int, dict[str, str]]:
    """The status line and header fields (names lower-cased) of a response."""
    status_line = _line(reader)
    if not status_line:  # a kept-alive connection the server closed meanwhile
        raise ConnectionResetError("the scheduler closed the connection")
    version, _, rest = status_line.decode("latin-1").partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise BadResponse(f"not an HTTP response: {status_line[:80]!r}")
    fields: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = _line(reader)
        if line in (b"\r\n", b"\n", b""):
            if 100 <= int(code) < 200:  # an interim answer: the real one follows
                return _read_head(reader)
            return version, int(code), fields
        name, _, value = line.decode("latin-1").partition(":")
        fields[name.strip().lower()] = value.strip()
    raise BadResponse("too many header fields")


def _length(text: str) -> int:
    if not text.isdigit():
        raise BadResponse(f"bad Content-Length {text[:20]!r}")
    if int(text) > MAX_RESPONSE:
        raise BadResponse("response too large")
    return int(text)


def _read_exactly(reader: BinaryIO, size: int) -> bytes:
    data = reader.read(size)
    if len(data) < size:
        raise BadResponse(f"answer cut short ({len(data)} of {size} bytes)")
    return data


def _read_chunked(reader: BinaryIO) -> bytes:
    body = bytearray()
    while True:
        size_text = _line(reader).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadResponse(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            while _line(reader) not in (b"\r\n", b"\n", b""):  # trailer fields
                pass
            return bytes(body)
        if len(body) + size > MAX_RESPONSE:
            raise BadResponse("response too large")
        body += _read_exactly(reader, size)
        _line(reader)  # the CRLF after the chunk


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
        self._conn: Connection | None = None

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
            except OSError as exc:
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
        if self._conn is None:
            parts = urlsplit(self.url)
            where = (parts.hostname or "127.0.0.1", parts.port or 80)
            self._conn = Connection(self.socket_path or where)
        return self._conn.exchange(method, path, payload, headers)

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
    from llamaherd.install import install_command
    from llamaherd.plugins import PROVIDED_BY, get_manager

    said = said or f"--env {environment}"
    hook = get_manager().hook.open_control_channel
    if not hook.get_hookimpls():
        dist = PROVIDED_BY[("hooks", "open_control_channel")]
        raise LlamaherdError(
            f"{said}: reaching a deployed scheduler needs a plugin such as {dist} "
            f"({install_command(dist)})"
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

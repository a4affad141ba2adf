"""Shared client of the in-sandbox commands: talk to the llamaherd gateway as this run.

Python 3 standard library only (runs inside any sandbox). $AL_GATEWAY_URL is http://HOST:PORT
or unix:///path/to/socket; $AL_RUN_TOKEN and $AL_RUN_ID authenticate. Every command prints one
JSON object on stdout and exits 0 when the gateway said ok, 1 when it refused, 2 on usage or
connection errors.
"""

import http.client
import json
import os
import socket
import sys
import time
from urllib.parse import urlsplit

TIMEOUT = 30


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over an AF_UNIX socket (the gateway socket mounted into containers)."""

    def __init__(self, path, timeout=TIMEOUT):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def _connection(url, timeout):
    if url.startswith("unix://"):
        return UnixHTTPConnection(url[len("unix://") :], timeout), ""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"AL_GATEWAY_URL must be http://HOST:PORT or unix:///path, got {url!r}")
    return http.client.HTTPConnection(
        parts.hostname, parts.port or 80, timeout=timeout
    ), parts.path.rstrip("/")


def request(method, path, body=None, timeout=TIMEOUT):
    """(HTTP status, JSON answer) of one gateway call (``timeout`` None: no limit)."""
    url = os.environ.get("AL_GATEWAY_URL", "")
    token = os.environ.get("AL_RUN_TOKEN", "")
    run_id = os.environ.get("AL_RUN_ID", "")
    if not (url and token and run_id):
        fail("not inside a llamaherd run (AL_GATEWAY_URL, AL_RUN_TOKEN, AL_RUN_ID unset)")
    try:
        conn, prefix = _connection(url, timeout)
    except ValueError as exc:
        fail(str(exc))
    headers = {"Authorization": f"Bearer {token}", "X-AL-Run-Id": run_id}
    data = None
    if body is not None:
        # UTF-8 (not \u escapes: the gateway takes each body up to its arguments' caps in UTF-8);
        # a lone surrogate (from an undecodable argument) as the JSON escape it is.
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "backslashreplace")
        headers["Content-Type"] = "application/json"
    try:
        conn.connect()
        try:
            conn.request(method, prefix + path, body=data, headers=headers)
        except OSError:  # refused before the whole body went (413, 429): its answer is there
            pass
        response = conn.getresponse()
        raw = response.read()
    except OSError as exc:
        fail(f"cannot reach the gateway at {url}: {exc}")
    finally:
        conn.close()
    try:
        answer = json.loads(raw) if raw else {}
    except ValueError:
        answer = {"ok": False, "error": raw.decode("utf-8", "replace")[:500]}
    return response.status, answer


def fail(message, code=2):
    print(json.dumps({"ok": False, "error": message}))
    sys.exit(code)


def usage(text):
    fail(f"usage: {os.path.basename(sys.argv[0])} {text}")


def finish(status, answer):
    """Print the answer; exit 0 when it is ok, else 1."""
    print(json.dumps(answer))
    ok = 200 <= status < 300 and answer.get("ok", True) is not False
    sys.exit(0 if ok else 1)


def call(method, path, body=None, timeout=TIMEOUT):
    finish(*request(method, path, body, timeout))


def arg_text(args):
    """The command's text argument(s), or stdin when none is given (or "-")."""
    if not args or args == ["-"]:
        return sys.stdin.read().strip()
    return " ".join(args)


def parse_value(text):
    """JSON when it parses, else the text itself (al-return 'json or text')."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def seconds(text):
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def wait_call(call_id, timeout):
    """Poll a call until it is no longer pending or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        status, answer = request("GET", f"/gateway/call/{call_id}")
        if status != 200 or answer.get("state") != "pending":
            if answer.get("state") == "error":
                answer["ok"] = False
            finish(status, answer)
        if time.monotonic() >= deadline:
            answer.update(ok=False, error=f"call {call_id} still pending after {timeout:g} s")
            finish(status, answer)
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 5.0)

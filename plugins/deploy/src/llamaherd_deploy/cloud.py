"""What ``al env prov`` asks of a cloud, whichever it is: a JSON client for its REST API, the
server it wants (``Spec``), the firewall rules, the cloud-init script, and the interface each
provider module implements (``hetzner.py``, ``vultr.py``).

Each provider's base URL is its public API unless ``AL_HETZNER_API_URL`` / ``AL_VULTR_API_URL``
says otherwise (a proxy, a test server); the same variables ``al creds test`` honours.

What a provider marks as ours: every resource ``al env prov`` creates carries the environment's
name and a random provision id (labels, tags, names: each API has its own way), recorded in the
environment file as ``[server] provisionId``. ``al env deprov`` deletes a resource only by the
id it recorded, and only after reading it back and finding those marks: a server, firewall or
key made by anyone else is never touched, even if an id in the file was edited.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from llamaherd import __version__
from llamaherd.api import CommandFailed
from llamaherd_deploy.helper import PROVISION_DONE, PROVISION_FAILED

TIMEOUT = 30.0  # seconds per API request
RETRIES = 3  # tries of a request a provider rate-limited or failed transiently
MAX_RETRY_WAIT = 10.0
# The peer's minimum for a plan it offers (VPS_CONSTANTS.MIN_VCPUS, MIN_RAM_MB).
MIN_CPUS = 2
MIN_RAM_MB = 2048
# Written by the cloud-init script on the server: done, or the command that failed (the
# helper's probe reports them: ``helper.provisioning``).
STATE_DIR = "/var/lib/llamaherd"
DONE = PROVISION_DONE
FAILED = PROVISION_FAILED


class CloudError(CommandFailed):
    """A cloud API refused or failed a request: ``status`` (0 when there was no HTTP error: an
    action that failed, or no answer), the provider's error ``code`` when it gave one, and its
    message."""

    def __init__(self, provider: str, what: str, status: int, code: str, message: str):
        self.status, self.code = status, code
        # Without an HTTP error: the provider's code for a failed action, or no answer at all.
        http = f"HTTP {status}" + (f" {code}" if code else "")
        where = http if status else code or "unreachable"
        super().__init__(f"{provider}: {what}: {message} ({where})")

    @property
    def gone(self) -> bool:
        return self.status == 404


class Api:
    """A provider's JSON REST API with a bearer token. ``error_of(body)`` extracts the
    provider's ``(code, message)`` from an error answer."""

    def __init__(
        self, provider: str, base_url: str, token: str, error_of: Any, backoff: float = 2.0
    ):
        self.provider = provider
        self.base = base_url.rstrip("/")
        self.token = token
        self.error_of = error_of
        self.backoff = backoff  # seconds before the first retry; doubled for each next one

    def request(self, method: str, path: str, body: Any = None, what: str = "") -> Any:
        """The answer's JSON (None for an empty one, as after a DELETE). Idempotent requests are
        retried on a rate limit or a transient failure; a POST only on a rate limit (the
        provider refused it before doing anything)."""
        what = what or f"{method} {path.split('?')[0]}"
        data = None if body is None else json.dumps(body).encode()
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json",
            "User-Agent": f"llamaherd-deploy/{__version__}",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(1, RETRIES + 1):
            request = urllib.request.Request(self.base + path, data, headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                    raw = response.read()
                return json.loads(raw) if raw.strip() else None
            except urllib.error.HTTPError as exc:
                error = self._error(exc, what)
                again = exc.code == 429 or (method != "POST" and exc.code in (500, 502, 503, 504))
                if not again or attempt == RETRIES:
                    raise error from None
                time.sleep(self._wait(exc.headers.get("Retry-After"), attempt))
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                if method == "POST" or attempt == RETRIES:
                    raise CloudError(self.provider, what, 0, "", str(reason)) from None
                time.sleep(self._wait(None, attempt))
        raise AssertionError("unreachable")

    def _wait(self, retry_after: str | None, attempt: int) -> float:
        """The provider's Retry-After when it gave one, else a doubling backoff; capped."""
        try:
            wait = float(retry_after) if retry_after else self.backoff * 2 ** (attempt - 1)
        except ValueError:
            wait = self.backoff * 2 ** (attempt - 1)
        return min(max(wait, 0.0), MAX_RETRY_WAIT)

    def find(self, path: str, key: str) -> dict[str, Any] | None:
        """``GET path``'s ``key``; None when the resource is gone (404)."""
        try:
            return self.request("GET", path)[key]
        except CloudError as exc:
            if exc.gone:
                return None
            raise

    def _error(self, exc: urllib.error.HTTPError, what: str) -> CloudError:
        raw = exc.read()
        try:
            code, message = self.error_of(json.loads(raw))
        except (ValueError, TypeError, KeyError, AttributeError):
            code, message = "", raw.decode(errors="replace").strip()[:200] or exc.reason
        return CloudError(self.provider, what, exc.code, code, message or str(exc.reason))


def api_url(variable: str, default: str) -> str:
    return os.environ.get(variable) or default


def key_body(public_key: str) -> str:
    """A public key without its comment (``type base64``): how two listings compare."""
    return " ".join(public_key.split()[:2])


@dataclass(frozen=True)
class Spec:
    """The server ``al env prov`` asks for."""

    environment: str
    provision_id: str
    region: str
    image: str
    size: str | None  # None: the cheapest with the peer's minimum (MIN_CPUS, MIN_RAM_MB)
    ssh_port: int
    gateway_port: int
    user: str
    base: str
    public_key: str

    @property
    def name(self) -> str:
        """The server's, firewall's and key's name (a valid host name: the environment's name
        rule leaves room for it)."""
        return f"llamaherd-{self.environment}"

    @property
    def ports(self) -> list[tuple[int, str]]:
        """What the firewall lets in: SSH and the gateway, nothing else."""
        return [(self.ssh_port, "SSH"), (self.gateway_port, "llamaherd gateway")]


@dataclass
class Server:
    """A provider's answer about one server: ready (running, with an address) or not."""

    id: str
    status: str
    ip: str | None

    @property
    def ready(self) -> bool:
        return self.ip is not None


class Cloud:
    """What each provider implements. Ids are kept as the provider gives them (Hetzner's
    numbers, Vultr's strings, which may be all digits and keep their leading zeros); the
    ``*_key`` names are the environment file's ``[server]`` keys."""

    name = ""
    label = ""
    credential = ""
    default_region = ""
    default_image = ""
    region_key = ""
    server_key = ""
    firewall_key = ""
    ssh_key_key = ""
    numeric_ids = False  # ids are stored as TOML integers, as the peer stores Hetzner's

    keys_path = ""  # where the account's SSH keys are listed
    key_field = ""  # the field of a listed key that holds its public key
    base_url = ""  # the public API
    url_variable = ""  # the environment variable that points it elsewhere

    def __init__(self, token: str, poll: float = 2.0):
        url = api_url(self.url_variable, self.base_url)
        self.api = Api(self.label, url, token, self.error_of, poll)
        self.poll = poll

    @staticmethod
    def error_of(body: dict[str, Any]) -> tuple[str, str]:
        """The provider's ``(code, message)`` in an error answer."""
        raise NotImplementedError

    def list_all(self, path: str, key: str) -> list[dict[str, Any]]:
        """Every item of a listing (``key`` in each page's answer), all pages read."""
        raise NotImplementedError

    def choose_size(self, region: str) -> str:
        raise NotImplementedError

    def no_size(self, region: str, what: str, minimum: str) -> CloudError:
        return CloudError(
            self.label,
            f"choosing a {what}",
            0,
            "",
            f"none with {minimum} is sold in {region!r} (name one with --size, or another "
            "--region)",
        )

    def find_key(self, public_key: str) -> str | None:
        """The id of a key already registered with ``public_key`` (then it is not ours)."""
        wanted = key_body(public_key)
        for key in self.list_all(self.keys_path, "ssh_keys"):
            if key_body(key.get(self.key_field, "")) == wanted:
                return str(key["id"])
        return None

    def create_key(self, spec: Spec) -> str:
        raise NotImplementedError

    def create_firewall(self, spec: Spec) -> str:
        raise NotImplementedError

    def create_server(self, spec: Spec, size: str, key: str, firewall: str) -> str:
        """Ask for the server; its id at once (``server`` says when it is up)."""
        raise NotImplementedError

    def server(self, server_id: str) -> Server:
        """The server now; a CloudError when its creation failed."""
        raise NotImplementedError

    def delete_server(self, server_id: str, owner: Owner) -> bool:
        """Delete (and wait until it is gone, so its firewall may go): False when it was gone
        already; CloudError when it is not ours."""
        raise NotImplementedError

    def delete_firewall(self, firewall_id: str, owner: Owner) -> bool:
        raise NotImplementedError

    def delete_key(self, key_id: str, owner: Owner) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class Owner:
    """The marks of what one ``al env prov`` created (``Spec.name``, ``Spec.provision_id``);
    an environment the peer provisioned has no provision id, only its names."""

    environment: str
    provision_id: str | None

    @property
    def name(self) -> str:
        return f"llamaherd-{self.environment}"

    @property
    def peer_name(self) -> str:
        return f"action-llama-{self.environment}"

    def refuse(self, provider: str, what: str, found: str) -> CloudError:
        return CloudError(
            provider,
            f"not deleting {what}",
            0,
            "refused here",
            f"it is not what `al env prov {self.environment}` made ({found})",
        )


class TimedOut(CommandFailed):
    """``wait_until`` gave up."""


def wait_until(check: Any, deadline: float, poll: float, what: str) -> Any:
    """``check()`` every ``poll`` seconds until it returns something true (returned) or
    ``deadline`` (monotonic) passes (``TimedOut``, saying ``what``)."""
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() + poll > deadline:
            raise TimedOut(f"{what} within the time allowed")
        time.sleep(poll)


def cloud_init(spec: Spec) -> str:
    """The server's first-boot script (user data, run once as root by cloud-init): the system
    packages a push needs (Python 3 with venv, Docker for the container runtime), the
    ``al-agent`` user the host-user runtime runs agents as, SSH on ``spec.ssh_port`` with keys
    only, the deploying user and its directory. ``al push`` installs llamaherd, the plugins the
    project uses and the scheduler's service on top. Its last step writes ``DONE``; a failed
    step writes itself into ``FAILED`` (``al env prov`` reads both over SSH)."""
    user, port, base = spec.user, spec.ssh_port, spec.base
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        "# Written by llamaherd-deploy (`al env prov`); runs once, as root, on the first boot.",
        "set -euo pipefail",
        f"mkdir -p {STATE_DIR}",
        f"trap 'echo \"line $LINENO: $BASH_COMMAND\" > {FAILED}' ERR",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -q",
        "apt-get install -y -q python3 python3-venv git ca-certificates curl docker.io fail2ban",
        "systemctl enable --now docker fail2ban",
        "id al-agent >/dev/null 2>&1 || useradd --system --user-group --no-create-home "
        "--home-dir /nonexistent --shell /bin/sh al-agent",
        "cat > /etc/ssh/sshd_config.d/10-llamaherd.conf <<'EOF'",
        f"Port {port}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "EOF",
    ]
    if user != "root":
        lines += [
            f"id {q(user)} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {q(user)}",
            f"usermod -aG docker {q(user)}",
            f"home=$(getent passwd {q(user)} | cut -d: -f6)",
            'install -d -m 700 -o "$(id -u ' + q(user) + ')" -g "$(id -g ' + q(user) + ')" '
            '"$home/.ssh"',
            f'echo {q(spec.public_key)} >> "$home/.ssh/authorized_keys"',
            f'chown {q(user)}: "$home/.ssh/authorized_keys"; chmod 600 "$home/.ssh/authorized_keys"',
            f"loginctl enable-linger {q(user)}",  # its systemd user units outlive its sessions
        ]
    target = f'"$home"/{q(base[2:])}' if base.startswith("~/") else q(base)
    if user == "root":
        lines.append("home=/root")
    lines += [
        f"install -d -m 700 -o {q(user)} {target}",
        # Ubuntu starts sshd from a socket: its generator reads the Port above on a reload.
        "systemctl daemon-reload",
        "systemctl restart ssh.socket 2>/dev/null || systemctl restart ssh 2>/dev/null "
        "|| systemctl restart sshd",
        f"touch {DONE}",
    ]
    return "\n".join(lines) + "\n"

"""The dashboard password: its verifier, where it is kept, and how guessing it is slowed.

The password is kept only as an scrypt verifier (a random salt, and a hash that costs about
32 MiB and tens of milliseconds to compute: ``hashlib.scrypt``, OpenSSL's), in
``.al/dashboard-password``, private to the scheduler's user (0600, in the 0700 ``.al/``).
``al dashboard password`` writes it. It used to be an unsalted SHA-256 in ``config.toml``
(``[dashboard] password_sha256``), a file ``al new`` makes readable by every local user: one
read it and found a dictionary password offline. That key is refused now (``al validate``
names the command that replaces it).

A verifier found readable by other users (or not the scheduler user's, or not a regular
file), or one ``.al/``'s check at start had to make private, may have been copied: it is moved
aside (``dashboard-password.exposed``) and the scheduler refuses to start until a new password
is set (or the exposed file is removed, to sign in with the control token only).

``SignInThrottle`` answers a client past ``MAX_FAILURES`` wrong sign-ins within ``WINDOW``
seconds (every loopback address being one client), or anyone once all clients together made
``MAX_FAILURES_ALL``, with 429 and ``Retry-After``, counting the sign-ins being checked as
wrong until they are known; at most ``CONCURRENT_CHECKS`` hashes are computed at once, so
guessing costs the attacker time and the server bounded memory.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

VERIFIER_FILE = "dashboard-password"
EXPOSED_SUFFIX = ".exposed"
MIN_LENGTH = 10  # characters of a password `al dashboard password` accepts
# scrypt's cost: N = 2**15, r = 8 (128 * r * N bytes = 32 MiB per check), p = 1.
LOG_N, BLOCK, PARALLEL = 15, 8, 1
MAX_MEMORY = 64 * 1024 * 1024
SCHEME = "$scrypt$"
MAX_FAILURES = 5  # wrong sign-ins of one client within WINDOW before it is told to wait
MAX_FAILURES_ALL = 50  # ... and of all clients together
WINDOW = 60.0
MAX_CLIENTS = 10_000  # clients whose failures are remembered (the oldest forgotten first)
CONCURRENT_CHECKS = 2


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: str, salt: bytes, log_n: int, block: int, parallel: int) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=2**log_n, r=block, p=parallel, maxmem=MAX_MEMORY, dklen=32
    )


def make_verifier(password: str) -> str:
    """``$scrypt$ln=15,r=8,p=1$<salt>$<hash>`` (the PHC string format) for ``password``."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, LOG_N, BLOCK, PARALLEL)
    return f"{SCHEME}ln={LOG_N},r={BLOCK},p={PARALLEL}${_b64(salt)}${_b64(digest)}"


def matches(verifier: str, password: str) -> bool:
    """Whether ``password`` is the one ``verifier`` was made from (constant-time compare)."""
    try:
        params, salt, digest = verifier.removeprefix(SCHEME).split("$")
        cost = dict(item.split("=") for item in params.split(","))
        log_n, block, parallel = int(cost["ln"]), int(cost["r"]), int(cost["p"])
        expected = _unb64(digest)
        # Only the costs this module writes: a tampered file must not make a check cost more.
        if not verifier.startswith(SCHEME) or (log_n, block, parallel) != (LOG_N, BLOCK, PARALLEL):
            return False
        given = _scrypt(password, _unb64(salt), log_n, block, parallel)
    except (ValueError, KeyError):
        return False
    return hmac.compare_digest(given, expected)


# ---------------------------------------------------------------------- the file
def verifier_path(state_dir: Path) -> Path:
    return state_dir / VERIFIER_FILE


def write_verifier(state_dir: Path, password: str) -> Path:
    """Write a new verifier for ``password`` (0600, replacing any, an exposed one included)."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = verifier_path(state_dir)
    temp = path.with_name(f".{VERIFIER_FILE}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask
        fh.write(make_verifier(password).encode() + b"\n")
    os.replace(temp, path)
    exposed = path.with_name(VERIFIER_FILE + EXPOSED_SUFFIX)
    exposed.unlink(missing_ok=True)
    return path


def exposure(path: Path, made_private: Collection[Path] = ()) -> str | None:
    """Why the verifier at ``path`` may have been copied by another user (None: it has not,
    or there is none): readable by others, not the scheduler user's, not a regular file, or
    among the files ``.al/``'s check at start had to make private (``made_private``)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.geteuid():
        return "belongs to another user"
    if stat.S_IMODE(info.st_mode) & 0o077 or path in made_private:
        return "was readable by other users"
    return None


def start_refusal(state_dir: Path, made_private: Collection[Path] = ()) -> str | None:
    """Why the scheduler must not start (None: it may): an exposed verifier is moved aside
    first, so it is never accepted again."""
    path = verifier_path(state_dir)
    exposed = path.with_name(VERIFIER_FILE + EXPOSED_SUFFIX)
    why = exposure(path, made_private)
    if why is not None:
        os.replace(path, exposed)
    elif not exposed.exists() or path.exists():
        return None
    return (
        f"{exposed}: the dashboard password's verifier "
        f"{why or 'was readable by other users'}: anyone could have copied it and "
        "guessed the password offline. Set a new password with `al dashboard password` (or "
        "remove that file to sign in with the control token only)"
    )


def load_verifier(state_dir: Path) -> str | None:
    """The verifier, when there is one that is private (else None: password sign-in is off)."""
    path = verifier_path(state_dir)
    if exposure(path) is not None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(1024).decode("ascii", "replace").strip() or None


# ---------------------------------------------------------------------- guessing
def client_key(address: str) -> str:
    """Who a sign-in comes from, for the throttle: an IPv4 address; an IPv6 one's /64 (one
    host is given a whole /64); every loopback address (all of 127/8, ``::1``) one client,
    ``loopback``, since any local process may pick any of them."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


class SignInThrottle:
    """Wrong sign-ins per client (``client_key``) and in all: past ``MAX_FAILURES`` of one
    client, or ``MAX_FAILURES_ALL`` of all clients together, within ``WINDOW`` seconds, a
    sign-in waits (``attempt``). An attempt counts from when it starts: those still being
    checked count as wrong until they are known, so concurrent guesses get no more tries
    than sequential ones. ``clock`` is injectable (tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )
        self._all: collections.deque[float] = collections.deque()
        self._checking: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self.checks = threading.BoundedSemaphore(CONCURRENT_CHECKS)

    @contextlib.contextmanager
    def attempt(self, address: str) -> Iterator[Attempt]:
        """One sign-in from ``address``: ``wait`` seconds when it must wait (it is not
        counted then), else in flight until it ends; ``Attempt.failed`` counts it wrong."""
        client = client_key(address)
        with self._lock:
            wait = self._wait(client)
            if not wait:
                self._checking[client] += 1
        attempt = Attempt(self, client, wait)
        try:
            yield attempt
        finally:
            if not wait:
                with self._lock:
                    self._checking[client] -= 1
                    if not self._checking[client]:
                        del self._checking[client]

    def _wait(self, client: str) -> int:
        """Seconds before ``client`` may try (0: now): until the oldest wrong try leaves the
        window, of the client or of all, whichever is full."""
        now = self.clock()
        waits = []
        recent = self._recent(client, now)
        if len(recent) + self._checking[client] >= MAX_FAILURES:
            waits.append(recent[0] + WINDOW - now if recent else 1)
        while self._all and self._all[0] <= now - WINDOW:
            self._all.popleft()
        if len(self._all) + sum(self._checking.values()) >= MAX_FAILURES_ALL:
            waits.append(self._all[0] + WINDOW - now if self._all else 1)
        return max(1, int(max(waits)) + 1) if waits else 0

    def failed(self, client: str) -> int:
        """Count a wrong sign-in of ``client`` (a key); how many it made within the window."""
        with self._lock:
            now = self.clock()
            recent = self._recent(client, now)
            recent.append(now)
            self._all.append(now)
            self._failures[client] = recent
            self._failures.move_to_end(client)
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
            return len(recent)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str, now: float) -> collections.deque[float]:
        recent = self._failures.get(client, collections.deque())
        while recent and recent[0] <= now - WINDOW:
            recent.popleft()
        return recent


@dataclass
class Attempt:
    """A sign-in in flight (``SignInThrottle.attempt``)."""

    throttle: SignInThrottle
    client: str
    wait: int  # seconds to wait before trying (0: it is being tried)

    def failed(self) -> int:
        """It was wrong: how many wrong ones its client made within the window."""
        return self.throttle.failed(self.client)

    def succeeded(self) -> None:
        self.throttle.succeeded(self.client)

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
seconds with 429 and ``Retry-After``; at most ``CONCURRENT_CHECKS`` hashes are computed at
once, so guessing costs the attacker time and the server bounded memory.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

VERIFIER_FILE = "dashboard-password"
EXPOSED_SUFFIX = ".exposed"
MIN_LENGTH = 10  # characters of a password `al dashboard password` accepts
# scrypt's cost: N = 2**15, r = 8 (128 * r * N bytes = 32 MiB per check), p = 1.
LOG_N, BLOCK, PARALLEL = 15, 8, 1
MAX_MEMORY = 64 * 1024 * 1024
SCHEME = "$scrypt$"
MAX_FAILURES = 5  # wrong sign-ins of one client within WINDOW before it is told to wait
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
class SignInThrottle:
    """Wrong sign-ins per client: past ``MAX_FAILURES`` within ``WINDOW`` seconds the client
    waits (``retry_after``). ``clock`` is injectable (tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.checks = threading.BoundedSemaphore(CONCURRENT_CHECKS)

    def retry_after(self, client: str) -> int:
        """Seconds ``client`` must wait before it may try again (0: it may now)."""
        with self._lock:
            recent = self._recent(client)
            if len(recent) < MAX_FAILURES:
                return 0
            return max(1, int(recent[0] + WINDOW - self.clock()) + 1)

    def failed(self, client: str) -> int:
        """Count a wrong sign-in; how many ``client`` made within the window."""
        with self._lock:
            recent = self._recent(client)
            recent.append(self.clock())
            self._failures[client] = recent
            self._failures.move_to_end(client)
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
            return len(recent)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str) -> collections.deque[float]:
        recent = self._failures.get(client, collections.deque())
        now = self.clock()
        while recent and recent[0] <= now - WINDOW:
            recent.popleft()
        return recent

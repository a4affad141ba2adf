"""The OpenSSH client as llamaherd drives it: one multiplexed connection per host.

Used by runtimes that reach other machines (the ``ssh`` runtime, Docker on a remote engine).
Why the system's ``ssh`` and not a Python SSH library: it is the client users already trust and
configure (``~/.ssh/config``, ``known_hosts``, agents, hardware keys, ``ProxyJump``), it
multiplexes sessions over one authenticated connection (``ControlMaster``), and it forwards
unix sockets both ways, which the runtimes use to reach a remote Docker engine and to let a
remote run reach the scheduler's gateway without opening a port.

Every ``ssh`` command line is built here: the host, user and options are validated first
(``SshTarget``), the options end with ``--`` so nothing that follows is read as one, host keys
are checked strictly (``StrictHostKeyChecking=yes``: a host missing from ``known_hosts`` is
refused, never added silently) unless the user's own ``ssh_options`` say otherwise, and every
connection attempt is bounded (``ConnectTimeout``), so a wrong host key, an unreachable host and
a refused key each end in one clear line (``SshError``), never a hang.

Remote commands are sent to the login shell as ``exec /bin/sh -c '...'`` with a fixed text;
what varies (paths, environment values, secrets) travels on the session's stdin
(``SshMaster.script``), so no value is ever parsed by the remote login shell or shown in the
remote host's process list.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamaherd.errors import SandboxError

CONNECT_TIMEOUT = 10  # seconds for the TCP connection and the SSH banner
# A master with no session and no forward left exits after this long (so a crashed scheduler
# leaves no connection behind for long); the next command opens a new one.
CONTROL_PERSIST = 600
# Seconds between keep-alives, and how many may go unanswered before the connection counts as
# lost: a dead peer is noticed within about 45 s, even mid-command.
ALIVE_INTERVAL, ALIVE_COUNT = 15, 3
# What ssh takes as a destination: a host name, an ~/.ssh/config alias, an IPv4 or IPv6
# address. Never a leading "-": ssh would read it as an option (-oProxyCommand=...).
HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*(%[\w.-]+)?")
# A login name as the usual tools accept it (useradd's rule, plus upper case and dots).
USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,31}\$?")
OPTION = re.compile(r"[A-Za-z][A-Za-z0-9]*")
# Options this module sets itself: the multiplexing it relies on, and never prompting.
RESERVED_OPTIONS = ("batchmode", "controlmaster", "controlpath", "controlpersist")
# Blocks of an ssh_config file, which ssh refuses as -o options ("Match exec" runs a command).
CONFIG_BLOCKS = ("host", "match", "include")
# Options with which ssh runs a command, or loads a library, on the machine it connects from:
# ssh_config(5). Honoured in a project's config (its owner wrote or accepted them: `al add`
# and `al update` ask before a fetched config brings one), warned about by `al validate`, and
# never acted on by `al doctor` or `al validate`, which connect to nothing whose options run one.
COMMAND_OPTIONS = (
    "proxycommand",
    "localcommand",
    "permitlocalcommand",
    "knownhostscommand",
    "pkcs11provider",
    "securitykeyprovider",
    "xauthlocation",
)
# Reads a script of the given length from stdin and runs it; what follows the script on stdin
# is the script's own input. No single quote inside: it is sent single-quoted, which every common
# login shell (sh, bash, zsh, fish, tcsh) passes through unchanged.
BOOTSTRAP = 'exec /bin/sh -c \'IFS= read -r n && eval "$(head -c "$n")"\''


class SshError(SandboxError):
    """An ssh connection or command failed: one line naming the host and what to do.

    ``kind`` says what went wrong: ``unreachable`` (no connection: the host may come back),
    ``host-key`` (its key differs from ``known_hosts``), ``unknown-host`` (not in
    ``known_hosts``), ``refused`` (the key was refused), ``failed`` (anything else)."""

    def __init__(self, message: str, kind: str = "failed"):
        super().__init__(message)
        self.kind = kind


def check_host(host: str, where: str) -> str:
    if not isinstance(host, str) or not HOST.fullmatch(host):
        raise SshError(
            f"{where}: {host!r} is not a host name, address or ~/.ssh/config alias "
            "(letters, digits, '.', '-', '_'; not starting with '-')"
        )
    return host


def check_user(user: str, where: str) -> str:
    if not isinstance(user, str) or not USER.fullmatch(user):
        raise SshError(
            f"{where}: {user!r} is not a login name (letters, digits, '.', '-', '_'; not "
            "starting with '-')"
        )
    return user


def check_options(options: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """``ssh_options`` as ``-o Name=value`` pairs: names are ssh_config keywords, values one
    line of text; the options this module owns are refused."""
    checked = []
    for name, value in options.items():
        if not OPTION.fullmatch(str(name)):
            raise SshError(f"{where}.{name}: not an ssh_config option name (letters and digits)")
        if name.lower() in RESERVED_OPTIONS:
            raise SshError(
                f"{where}.{name}: set by llamaherd itself (connections are multiplexed and "
                "never prompt); remove it"
            )
        if name.lower() in CONFIG_BLOCKS:
            raise SshError(
                f"{where}.{name}: a block of an ssh_config file, not an option (ssh refuses it "
                "with -o); put it in ~/.ssh/config"
            )
        text = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        if not text or any(ord(c) < 32 for c in text):
            raise SshError(f"{where}.{name}: expected a one-line value, got {value!r}")
        checked.append((str(name), text))
    return tuple(checked)


@dataclass(frozen=True)
class SshTarget:
    """Where to connect and how: validated on creation (``SshError`` naming ``where``)."""

    host: str
    user: str | None = None
    port: int | None = None
    key_path: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    where: str = field(default="ssh", compare=False)

    def __post_init__(self) -> None:
        check_host(self.host, f"{self.where}.host")
        if self.user is not None:
            check_user(self.user, f"{self.where}.user")
        port = self.port
        if port is not None and (not isinstance(port, int) or not 0 < port < 65536):
            raise SshError(f"{self.where}.port: expected an integer 1-65535, got {port!r}")
        if self.key_path is not None and (not self.key_path or "\n" in self.key_path):
            raise SshError(f"{self.where}.key_path: expected a path, got {self.key_path!r}")

    @classmethod
    def of(cls, table: Mapping[str, Any], where: str) -> SshTarget:
        """From a config table with the peer's keys: ``host``, ``port``, ``user``,
        ``key_path``, ``ssh_options``."""
        options = table.get("ssh_options") or {}
        if not isinstance(options, Mapping):
            raise SshError(f"{where}.ssh_options: expected a table of option = value")
        return cls(
            host=table.get("host"),  # type: ignore[arg-type]
            user=table.get("user"),
            port=table.get("port"),
            key_path=table.get("key_path"),
            options=check_options(options, f"{where}.ssh_options"),
            where=where,
        )

    @property
    def label(self) -> str:
        """``user@host:port`` as far as the config says it (messages, keys of tables)."""
        who = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{who}{host}" + (f":{self.port}" if self.port else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for a sandbox handle (``from_dict`` reads it back)."""
        return {
            "host": self.host,
            "user": self.user,
            "port": self.port,
            "key_path": self.key_path,
            "options": [list(pair) for pair in self.options],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SshTarget:
        return cls(
            host=data["host"],
            user=data.get("user"),
            port=data.get("port"),
            key_path=data.get("key_path"),
            options=tuple((str(k), str(v)) for k, v in data.get("options") or []),
            where="handle",
        )

    def argv(self, control: str, *extra: str) -> list[str]:
        """``ssh`` with this target's settings and ``control`` as the ControlPath, then
        ``extra`` options, ``--`` and the host: a remote command may follow."""
        args = ["ssh"]
        # ssh keeps the first value it reads for an option: the user's own come first.
        for name, value in self.options:
            args += ["-o", f"{name}={value}"]
        args += [
            "-o", "BatchMode=yes",  # never prompt: nobody is there to answer
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL}",
            "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
            "-o", f"ControlPath={control}",
        ]  # fmt: skip
        if self.port:
            args += ["-p", str(self.port)]
        if self.user:
            args += ["-l", self.user]
        if self.key_path:
            args += ["-i", str(Path(self.key_path).expanduser()), "-o", "IdentitiesOnly=yes"]
        return [*args, *extra, "--", self.host]

    def insecure_options(self) -> list[str]:
        """The options that switch host key checking off (for a warning)."""
        return [
            f"{name}={value}"
            for name, value in self.options
            if name.lower() == "stricthostkeychecking" and value.lower() in ("no", "off")
        ]

    def command_options(self) -> list[str]:
        """The names of the options with which ssh runs a command (or loads a library) on
        this machine (``COMMAND_OPTIONS``; "none" and "no" turn one off)."""
        return [
            name
            for name, value in self.options
            if name.lower() in COMMAND_OPTIONS and value.lower() not in ("none", "no")
        ]

    def option_warnings(self) -> list[str]:
        """``al validate``'s warnings about this target's options: host keys not checked, a
        command run on this machine."""
        found = [
            f"warning: {self.label}: ssh_options {option} switches host key checking off: "
            "anyone between here and the host can pose as it"
            for option in self.insecure_options()
        ]
        found += [
            f"warning: {self.label}: ssh_options.{name} runs a command on this machine, as the "
            "scheduler's user, whenever a run connects to the host (`al validate` and "
            "`al doctor` run none); a jump host needs none (ProxyJump)"
            for name in self.command_options()
        ]
        return found

    def unchecked(self) -> str | None:
        """Why a check of the configuration (``al validate``, ``al doctor``) does not connect
        to this target: its options would run a command on this machine (None: it may)."""
        names = self.command_options()
        if not names:
            return None
        return (
            f"not connected: ssh_options {', '.join(names)} would run a command on this "
            "machine, and a check of the configuration runs none of an agent's commands (a "
            "run connects)"
        )


def failure(target: SshTarget, stderr: str) -> SshError:
    """A failed connection to ``target`` as one line: what happened and what to do (a host key
    fix names the known_hosts file the connection reads: ``ssh_options.UserKnownHostsFile``
    when the target sets it)."""
    text = stderr.strip()
    where = target.label
    known, file_option = known_hosts(target)
    if "IDENTIFICATION HAS CHANGED" in text or "has changed and you have requested" in text:
        return SshError(
            f"ssh {where}: the host key does not match the one in {known} (a reinstalled server, "
            "or someone in between): check the server's key, then replace the entry "
            f"(ssh-keygen{file_option} -R {shlex.quote(_known_name(target))})",
            "host-key",
        )
    if "host key is known" in text or "Host key verification failed" in text:
        return SshError(
            f"ssh {where}: the host key is not in {known} (host keys are never accepted "
            "unseen): check its fingerprint, then add it (ssh-keyscan"
            f"{f' -p {target.port}' if target.port else ''} {target.host} >> "
            f"{_shell_path(_known_file(target) or DEFAULT_KNOWN_HOSTS)})",
            "unknown-host",
        )
    if "Permission denied" in text:
        key = f" ({target.key_path})" if target.key_path else ""
        return SshError(
            f"ssh {where}: the key{key} was refused: add its public key to "
            f"~{target.user or ''}/.ssh/authorized_keys on the host",
            "refused",
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = lines[-1] if lines else "the connection failed"
    reason = reason.removeprefix("ssh: ")
    return SshError(f"ssh {where}: unreachable: {reason}", "unreachable")


DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def _known_file(target: SshTarget) -> str | None:
    """The known_hosts file the target's ``ssh_options.UserKnownHostsFile`` names first (the
    one ssh reads first and ``ssh-keygen -f`` edits), else None (ssh's default)."""
    for name, value in target.options:
        if name.lower() == "userknownhostsfile" and value.split():
            return value.split()[0]
    return None


def known_hosts(target: SshTarget) -> tuple[str, str]:
    """(how a message names the known_hosts file ``target`` reads, the ``-f FILE`` option of
    ``ssh-keygen`` for it: empty for ssh's default file)."""
    file = _known_file(target)
    if file is None:
        return f"the user's {DEFAULT_KNOWN_HOSTS}", ""
    return f"{file} (ssh_options.UserKnownHostsFile)", f" -f {_shell_path(file)}"


def _shell_path(path: str) -> str:
    """``path`` for a shell command line, a leading ``~/`` left for the shell to expand."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def _known_name(target: SshTarget) -> str:
    return f"[{target.host}]:{target.port}" if target.port and target.port != 22 else target.host


class SshMaster:
    """The multiplexed connection to one target: opened on first use, re-opened when it was
    lost, closed at ``close()`` (and when this process exits). Thread-safe.

    ``forward``s are kept while the master lives and restored when it is re-opened (a remote
    socket path is removed first, so a restored forward can take its place)."""

    def __init__(self, target: SshTarget, control_dir: str):
        if shutil.which("ssh") is None:
            raise SshError(
                "the ssh command is not installed (llamaherd drives the OpenSSH client: "
                "apt-get install openssh-client)"
            )
        self.target = target
        digest = hashlib.sha256(repr(target).encode()).hexdigest()[:16]
        self.control = os.path.join(control_dir, digest)
        self._log = self.control + ".log"
        self._lock = threading.Lock()
        self._forwards: dict[str, tuple[str, str]] = {}  # key -> (flag, spec)

    def __repr__(self) -> str:
        return f"<SshMaster {self.target.label}>"

    # ------------------------------------------------------------------ the connection
    def connect(self) -> None:
        """Open the connection unless it is up; ``SshError`` (one line) when it cannot be."""
        with self._lock:
            if os.path.exists(self.control) and self._check():
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.control)  # a master killed without a chance to remove it
            self._open()
            for key, (flag, spec) in list(self._forwards.items()):
                self._forward(key, flag, spec)

    def _open(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._log)
        argv = self.target.argv(
            self.control,
            "-o", "ControlMaster=yes",
            "-o", f"ControlPersist={CONTROL_PERSIST}",
            "-E", self._log,  # the backgrounded master must not hold a pipe of ours open
            "-N",
        )  # fmt: skip
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=CONNECT_TIMEOUT + 20
            )
        except subprocess.TimeoutExpired:
            raise SshError(
                f"ssh {self.target.label}: unreachable: no answer within {CONNECT_TIMEOUT + 20} s",
                "unreachable",
            ) from None
        if done.returncode != 0 or not os.path.exists(self.control):
            log = ""
            with contextlib.suppress(OSError):
                log = Path(self._log).read_text(errors="replace")
            raise failure(self.target, log + done.stderr.decode(errors="replace"))

    def _check(self) -> bool:
        done = subprocess.run(
            self.target.argv(self.control, "-O", "check"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        return done.returncode == 0

    def alive(self) -> bool:
        """Whether the connection is up now (without opening one)."""
        with self._lock:
            return os.path.exists(self.control) and self._check()

    def close(self) -> None:
        """End the connection and its forwards."""
        with self._lock:
            self._forwards.clear()
            if os.path.exists(self.control):
                subprocess.run(
                    self.target.argv(self.control, "-O", "exit"),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                )

    # ------------------------------------------------------------------ sessions
    def argv(self, command: str = BOOTSTRAP) -> list[str]:
        """The command line of one session over this connection, running ``command``."""
        return [*self.target.argv(self.control, "-o", "ControlMaster=no"), command]

    def popen(self, script: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        """A session running ``script`` with nothing more on its stdin, left running: read its
        ``stdout``/``stderr`` (pass ``subprocess.PIPE`` for them in ``kwargs``)."""
        self.connect()
        proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE, **kwargs)
        assert proc.stdin is not None
        try:
            proc.stdin.write(_session_input(script))
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the session ended at once: its stderr says why
        return proc

    def script(self, script: str, data: bytes = b"", timeout: float = 60) -> bytes:
        """Run ``script`` (``/bin/sh``) remotely with ``data`` as its stdin; its stdout, or
        ``SshError`` with its last stderr line when it exits non-zero."""
        self.connect()
        try:
            done = subprocess.run(
                self.argv(),
                input=_session_input(script, data),
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise SshError(
                f"ssh {self.target.label}: no answer within {timeout:g} s", "unreachable"
            ) from None
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace")
            # What failed says why on stderr, or on stdout (nologin's "not available").
            said = err.strip() or done.stdout.decode(errors="replace").strip()
            lines = [line for line in said.splitlines() if line.strip()]
            if done.returncode == 255 and not self.alive():
                raise failure(self.target, err)
            reason = lines[-1] if lines else f"exit status {done.returncode}"
            raise SshError(f"ssh {self.target.label}: {reason}")
        return done.stdout

    # ------------------------------------------------------------------ forwards
    def forward(self, key: str, flag: str, spec: str) -> None:
        """Add a forward (``flag`` "-L" or "-R", ``spec`` as ssh takes it), kept under ``key``
        and restored if the connection is re-opened."""
        self.connect()
        with self._lock:
            self._forward(key, flag, spec)
            self._forwards[key] = (flag, spec)

    def _forward(self, key: str, flag: str, spec: str) -> None:
        # A socket left by a lost connection would refuse the bind.
        listen = spec.split(":", 1)[0]
        if flag == "-R":
            subprocess.run(
                self.argv(),
                input=_session_input(f"rm -f -- {shlex.quote(listen)}"),
                capture_output=True,
                timeout=30,
            )
        elif listen.startswith("/"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(listen)
        done = subprocess.run(
            self.target.argv(self.control, "-O", "forward", flag, spec),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
        )
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip() or "refused"
            raise SshError(f"ssh {self.target.label}: cannot forward {key}: {reason}")

    def cancel(self, key: str) -> None:
        """Remove the forward kept under ``key`` (nothing when there is none)."""
        with self._lock:
            found = self._forwards.pop(key, None)
            if found is None or not os.path.exists(self.control):
                return
            subprocess.run(
                self.target.argv(self.control, "-O", "cancel", *found),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
            )


def tar_archive(entries: Iterable[tuple[str, int, bytes | None]], parents: int = 0o700) -> bytes:
    """A tar archive of ``(path, mode, data)`` entries (``data`` None: a directory), in order,
    each preceded by the directories it needs that were not listed (mode ``parents``): how a
    runtime sends a run's files in one session (``tar -xpf -`` on the host keeps the modes)."""
    import tarfile  # here: a scheduler's start imports the ssh plugin's settings, not this

    buffer = io.BytesIO()
    made: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:

        def add(path: str, mode: int, data: bytes | None) -> None:
            info = tarfile.TarInfo(path)
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                made.add(path)
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        for path, mode, data in entries:
            parts = path.split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in made:
                    add(directory, parents, None)
            add(path, mode, data)
    return buffer.getvalue()


def _session_input(script: str, data: bytes = b"") -> bytes:
    """What ``BOOTSTRAP`` reads: the script's length, the script, then the script's input."""
    encoded = script.encode()
    return b"%d\n" % len(encoded) + encoded + data


class SshMasters:
    """One ``SshMaster`` per target for this process, their control sockets in a private
    directory (0700) removed at exit with the connections."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._masters: dict[SshTarget, SshMaster] = {}
        self._lock = threading.Lock()

    def get(self, target: SshTarget) -> SshMaster:
        with self._lock:
            if self._dir is None:
                # Short: a unix socket path has ~107 bytes at most.
                self._dir = tempfile.mkdtemp(prefix="al-ssh-", dir="/tmp")
                atexit.register(self.close)
            master = self._masters.get(target)
            if master is None:
                master = self._masters[target] = SshMaster(target, self._dir)
            return master

    def close(self) -> None:
        with self._lock:
            masters, self._masters = list(self._masters.values()), {}
            directory, self._dir = self._dir, None
        for master in masters:
            with contextlib.suppress(Exception):
                master.close()
        if directory:
            shutil.rmtree(directory, ignore_errors=True)

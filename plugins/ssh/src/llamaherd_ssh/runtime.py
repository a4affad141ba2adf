"""The ``ssh`` runtime: an agent's tool calls and hooks run on another machine, over OpenSSH.

One multiplexed connection per host (``SshMasters``); each run gets a private dir there
(``remote``) with its credentials (0700) and the language-skill commands, every command runs
in it with the run's environment, and the scheduler's gateway is forwarded into it as a unix
socket over the same connection, so the run reaches the gateway without any port being opened
and the model session (and its key) never leaves the scheduler. A pool places each run on the
least-loaded reachable host with room (``pool``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llamaherd.api import (
    SHARED_PATH,
    ConfigError,
    SandboxBusy,
    SandboxError,
    SandboxLost,
    SandboxSpec,
    SshError,
    SshMasters,
    SshTarget,
    pid_alive,
)
from llamaherd_ssh import remote
from llamaherd_ssh.pool import BUSY_RETRY, RETRY_DOWN_AFTER, Pool
from llamaherd_ssh.sandbox import Leftovers, SshSandbox
from llamaherd_ssh.settings import SCHEMA, Host, Settings

log = logging.getLogger("llamaherd.ssh")

START_TIMEOUT = 120.0
# A run dir of another machine's scheduler, not live in the shared database, is removed only
# once it is this old: it may belong to a run being started right now.
FOREIGN_GRACE = 600.0
MAX_SOCKET_PATH = 100  # a unix socket path has ~107 bytes at most
# Connection failures that may pass: the run fails (or goes to another host) but the agent is
# not held in error for them.
TRANSIENT = ("unreachable",)


def _socket_path(run_dir: str) -> str:
    path = f"{run_dir}/gw.sock"
    return path if len(path) <= MAX_SOCKET_PATH else f"{remote.SOCKETS}{secrets.token_hex(8)}.sock"


def _env(spec: SandboxSpec, run_dir: str, socket_path: str) -> dict[str, str]:
    """The environment of every exec: the run's ``AL_*`` variables and credential env, with
    paths on the host."""
    credentials = f"{run_dir}/credentials"
    env = {
        **spec.env,
        **spec.credential_env(credentials),
        "AL_CREDENTIALS_PATH": credentials,
        "TMPDIR": f"{run_dir}/tmp",
        "AL_GATEWAY_URL": f"unix://{socket_path}",
    }
    if spec.shared_files:  # no /app/static/shared on a host of the user's: here instead
        env["AL_SHARED_PATH"] = f"{run_dir}/shared"
    return env


def _settings_or_none(agent: Any) -> Settings | None:
    try:
        return Settings.of(agent)
    except ConfigError:
        return None


class SshRuntime:
    """``[runtime] type = "ssh"``: see the module docstring and the package README."""

    name = "ssh"
    description = (
        "Another machine over OpenSSH (one multiplexed connection per host, a private dir per "
        "run); one host, or a pool placing each run on the least-loaded reachable host."
    )
    schema = SCHEMA

    def __init__(self) -> None:
        self.masters = SshMasters()
        self.leftovers = Leftovers()

    # ------------------------------------------------------------------ config
    def validate(self, agent: Any, project: Any) -> list[Any]:
        """Errors ``al validate`` reports that the schema cannot express, and warnings."""
        try:
            settings = Settings.of(agent)
        except ConfigError as exc:
            return [exc]
        warnings = [line for host in settings.hosts for line in host.target.option_warnings()]
        if (project.root / "shared").is_dir():
            warnings.append(
                f"warning: shared/: ssh runs of {agent.name} see these files at "
                f"$AL_SHARED_PATH (<run dir>/shared on the host), not at {SHARED_PATH}"
            )
        return warnings

    def prepare(self, agent: Any, project: Any = None) -> None:
        """Check the agent's settings (hosts are reached when a run starts: ``al doctor``
        checks them now)."""
        Settings.of(agent)

    def status(self, agent: Any, store: Any) -> list[str]:
        """One line per host that is worth a look: a pool's load, a host that is down."""
        settings = _settings_or_none(agent)
        if settings is None or store is None:
            return []
        lines = []
        for view in Pool(store).views(settings.hosts):
            if view.up is False:
                when = time.strftime("%H:%M:%S", time.localtime(view.since or 0))
                reason = (view.error or "").removeprefix(f"ssh {view.key}: ")
                lines.append(f"{view.key}: down since {when}: {reason}")
            elif settings.pool:
                room = "no limit" if view.capacity is None else f"{view.capacity}"
                lines.append(f"{view.key}: {view.active}/{room} runs")
        return lines

    # ------------------------------------------------------------------ sandboxes
    def start(self, spec: SandboxSpec) -> SshSandbox:
        """A private dir for the run on its host (placed, for a pool). ``SandboxBusy`` when
        every host of a pool is full or unreachable; ``SandboxLost`` when the one host is
        unreachable; ``SandboxError`` (one line) for a refused key or host key, a bad cwd."""
        settings = Settings.of(spec.agent)
        if not spec.gateway_socket:
            raise SandboxError("ssh: no gateway socket to forward to the host (start a scheduler)")
        pool = Pool(spec.store) if spec.store is not None else None
        if settings.pool:
            if pool is None:
                raise SandboxError("ssh: a pool needs the project's store to place runs")
            return self._place(spec, settings, pool)
        host = settings.hosts[0]
        try:
            sandbox = self._start_on(host, spec, settings, None)
        except SshError as exc:
            if pool is not None and exc.kind != "failed":
                pool.mark(host.key, str(exc))
            if exc.kind in TRANSIENT:
                raise SandboxLost(str(exc)) from None
            raise
        if pool is not None:
            pool.mark(host.key, None)
        return sandbox

    def _place(self, spec: SandboxSpec, settings: Settings, pool: Pool) -> SshSandbox:
        candidates = list(settings.hosts)
        failures: list[str] = []
        while True:
            down = pool.down(candidates)
            ready = [h for h in candidates if h.key not in down]
            if not ready:
                what = (
                    "; ".join(failures) or f"every host failed in the last {RETRY_DOWN_AFTER:g} s"
                )
                raise SandboxBusy(f"no host of the pool is reachable ({what})", BUSY_RETRY)
            host = pool.lease(ready, spec.run_id, spec.agent.name)
            if host is None:
                keys = ", ".join(h.key for h in ready)
                raise SandboxBusy(f"every reachable host of the pool is full ({keys})", BUSY_RETRY)

            def release(run_id: str = spec.run_id) -> None:
                pool.release(run_id)

            try:
                sandbox = self._start_on(host, spec, settings, release)
            except SshError as exc:
                release()
                if exc.kind == "failed":
                    raise
                log.warning("run %s: host %s skipped: %s", spec.run_id, host.key, exc)
                pool.mark(host.key, str(exc))
                failures.append(str(exc))
                candidates.remove(host)
                continue
            except BaseException:
                release()
                raise
            pool.mark(host.key, None)
            return sandbox

    def _start_on(
        self,
        host: Host,
        spec: SandboxSpec,
        settings: Settings,
        release: Callable[[], None] | None,
    ) -> SshSandbox:
        master = self.masters.get(host.target)
        master.connect()
        self.leftovers.remove(master)  # the host is back: what a lost run left goes first
        owner = {
            "project": str(spec.project.root),
            "machine": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "run_id": spec.run_id,
        }
        data = remote.archive(owner, spec.bin_dir, spec.credential_files, spec.shared_files)
        out = master.script(remote.start_script(host.cwd, spec.run_id), data, START_TIMEOUT)
        run_dir = out.decode(errors="replace").strip().splitlines()[-1]
        socket_path = _socket_path(run_dir)
        try:
            if not socket_path.startswith(f"{run_dir}/"):  # named in the run dir: removed with it
                master.script(remote.link_socket_script(run_dir, socket_path))
            master.forward(f"gateway:{spec.run_id}", "-R", f"{socket_path}:{spec.gateway_socket}")
        except BaseException:
            with contextlib.suppress(SshError):
                master.script(remote.remove_script(f"AL_RUN_ID={spec.run_id}", run_dir, False))
            raise
        return SshSandbox(
            master,
            spec.run_id,
            run_dir,
            _env(spec, run_dir, socket_path),
            socket=socket_path,
            keep_workdir=settings.keep_workdir,
            release=release,
            leftovers=self.leftovers,
        )

    def attach(self, handle: dict[str, Any], spec: SandboxSpec | None) -> SshSandbox | None:
        """The sandbox of ``handle`` while its dir is still on its host (after a restart;
        without ``spec``, only to remove it)."""
        try:
            target = SshTarget.from_dict(handle["target"])
            run_id, run_dir = str(handle["run_id"]), str(handle["run_dir"])
        except (KeyError, TypeError, SshError):
            return None
        master = self.masters.get(target)
        socket_path = handle.get("socket") or _socket_path(run_dir)
        env = _env(spec, run_dir, socket_path) if spec is not None else {}
        release = None
        if spec is not None and spec.store is not None:
            pool = Pool(spec.store)

            def release() -> None:
                pool.release(run_id)

        sandbox = SshSandbox(
            master,
            run_id,
            run_dir,
            env,
            socket=socket_path,
            keep_workdir=bool(handle.get("keep_workdir")),
            release=release,
            leftovers=self.leftovers,
        )
        if not sandbox.alive():
            return None
        if spec is not None and spec.gateway_socket:
            master.forward(f"gateway:{run_id}", "-R", f"{socket_path}:{spec.gateway_socket}")
        return sandbox

    def cleanup_orphans(self, live_run_ids: set[str], project: Any = None) -> int:
        """Remove ``project``'s run dirs (and their processes) on its agents' hosts that no
        live run owns: what a crashed scheduler left. Hosts are visited in parallel; one that
        cannot be reached is skipped (with a warning)."""
        if project is None:
            return 0
        places: dict[tuple[SshTarget, str], None] = {}
        for agent in project.agents.values():
            if agent.runtime.get("type") != self.name:
                continue
            settings = _settings_or_none(agent)
            for host in settings.hosts if settings else ():
                places[(host.target, host.cwd)] = None
        if not places:
            return 0
        root = str(project.root)
        with ThreadPoolExecutor(max_workers=min(8, len(places))) as executor:
            counts = executor.map(
                lambda place: self._clean_host(*place, live_run_ids, root), list(places)
            )
            return sum(counts)

    def _clean_host(self, target: SshTarget, cwd: str, live: set[str], root: str) -> int:
        master = self.masters.get(target)
        try:
            listing = master.script(remote.list_script(cwd))
        except SshError as exc:
            log.warning("ssh: orphan cleanup skipped %s: %s", target.label, exc)
            return 0
        removed = 0
        for line in listing.decode(errors="replace").splitlines():
            run_dir, _, owner_text = line.partition("\t")
            owner = _parse_owner(owner_text)
            run_id = str(owner.get("run_id") or os.path.basename(run_dir))
            if owner.get("project") != root or run_id in live or _owner_busy(owner):
                continue
            try:
                master.script(remote.remove_script(f"AL_RUN_ID={run_id}", run_dir, False))
                removed += 1
            except SshError as exc:
                log.warning("ssh: could not remove %s on %s: %s", run_dir, target.label, exc)
        return removed


def _parse_owner(text: str) -> dict[str, Any]:
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _owner_busy(owner: dict[str, Any]) -> bool:
    """Whether the scheduler that made a run dir may still be starting that run: a live
    process of this machine other than us, or another machine's, recently."""
    pid = owner.get("pid")
    if owner.get("machine") == socket.gethostname():
        return isinstance(pid, int) and pid != os.getpid() and pid_alive(pid)
    started = owner.get("started")
    return not isinstance(started, (int, float)) or time.time() - started < FOREIGN_GRACE

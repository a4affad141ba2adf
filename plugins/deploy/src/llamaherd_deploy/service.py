"""``al service``: keep a project's scheduler running on a server, under systemd where systemd
runs, else under ``llamaherd_deploy.supervisor``.

Which one is ``helper.service_mode``: a system unit as root, a user unit for another user whose
lingering is on, else the supervisor. ``al push`` calls ``al service stop`` and ``start`` on the
server; they work the same by hand. A project deployed by ``al push`` is run through its
``current`` links (``<base>/current/venv/bin/al --project <base>/current/project``), so the unit
never changes from one release to the next.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamaherd.api import (
    AppContext,
    CommandFailed,
    ControlClient,
    LlamaherdError,
    control_token,
    pid_alive,
    scheduler_info,
)
from llamaherd_deploy.helper import service_mode, unit_name

START_TIMEOUT = 120.0
STOP_MARGIN = 60.0  # beyond the grace period, for the scheduler to write its last state

# systemd options that confine the scheduler without breaking what it does: run agents as other
# users (host-user), talk to Docker, keep waiting runs' sandboxes across restarts.
HARDENING = """\
NoNewPrivileges=yes
ProtectSystem=full
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectHostname=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native
UMask=0077
"""


@dataclass(frozen=True)
class Service:
    """One project's scheduler as a service on this host."""

    name: str
    mode: str  # system, user or supervised
    why: str
    project: str  # the project path as the service runs it (through `current` when deployed)
    state: Path  # the project's .al
    al: tuple[str, ...]  # the command that runs this project's al
    credentials: str | None  # AL_CREDENTIALS_DIR, when set
    root: str  # the deployment's base, or the project itself

    @classmethod
    def of(cls, app: AppContext) -> Service:
        project = app.project
        given = Path(app.project_dir).absolute() if app.project_dir else project.root
        deployed = given.parent / "venv" / "bin" / "al"
        if deployed.exists():  # <base>/current/project: a project `al push` deployed
            al: tuple[str, ...] = (str(deployed),)
            root = given.parent.parent
        else:
            al, root = (sys.executable, "-m", "llamaherd"), given
        mode = service_mode()
        return cls(
            name=unit_name(root),
            mode=mode["mode"],
            why=mode["why"],
            project=str(given),
            state=project.state_dir.resolve(),  # <base>/state for a deployment
            al=al,
            credentials=os.environ.get("AL_CREDENTIALS_DIR"),
            root=str(root),
        )

    @property
    def systemd(self) -> bool:
        return self.mode in ("system", "user")

    @property
    def system(self) -> bool:
        """A system unit (as root), else a user unit: also what ``install --print`` shows
        where systemd does not run."""
        return self.mode == "system" or (self.mode == "supervised" and os.geteuid() == 0)

    @property
    def unit_path(self) -> Path:
        if self.system:
            return Path("/etc/systemd/system") / f"{self.name}.service"
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return config / "systemd" / "user" / f"{self.name}.service"

    def start_command(self, grace: float) -> list[str]:
        return [*self.al, "--project", self.project, "start", "--grace", f"{grace:g}"]

    def unit(self, grace: float) -> str:
        """The systemd unit: restart on failure, a stop that waits for the grace period, and
        the hardening options (system units only: a user manager cannot apply most of them)."""
        environment = (
            f"Environment={_quote('AL_CREDENTIALS_DIR=' + self.credentials, command=False)}\n"
            if self.credentials
            else ""
        )
        hardening = HARDENING if self.system else "NoNewPrivileges=yes\nUMask=0077\n"
        target = "multi-user.target" if self.system else "default.target"
        return (
            "# Written by `al service install`; `al service uninstall` removes it.\n"
            "[Unit]\n"
            f"Description=llamaherd scheduler for {self.project}\n"
            "After=network-online.target docker.service\n"
            "Wants=network-online.target\n"
            "StartLimitIntervalSec=600\n"
            "StartLimitBurst=5\n"
            "\n[Service]\n"
            "Type=simple\n"
            f"WorkingDirectory={_quote(self.project, command=False)}\n"
            f"{environment}"
            f"EnvironmentFile=-{_quote(str(self.env_file), command=False)}\n"
            f"ExecStart={' '.join(_quote(a) for a in self.start_command(grace))}\n"
            "Restart=on-failure\n"
            "RestartSec=5\n"
            "# The scheduler ends its active runs within --grace and leaves waiting runs'\n"
            "# sandboxes for the next start: signal only its main process, and wait for it.\n"
            "KillMode=process\n"
            f"TimeoutStopSec={grace + STOP_MARGIN:g}\n"
            f"{hardening}"
            f"\n[Install]\nWantedBy={target}\n"
        )

    # ------------------------------------------------------------------ systemd
    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["systemctl", *(["--user"] if self.mode == "user" else []), *args]
        env = dict(os.environ)
        if self.mode == "user":  # an SSH session without pam_systemd may lack it
            env.setdefault("XDG_RUNTIME_DIR", f"/run/user/{os.geteuid()}")
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        if check and result.returncode != 0:
            raise CommandFailed(
                f"{' '.join(command)} failed: {result.stderr.strip() or result.returncode}"
            )
        return result

    def install(self, grace: float) -> bool:
        """Write (or refresh) and enable the unit; True when its text changed."""
        if not self.systemd:
            raise CommandFailed(f"cannot install a systemd unit here: {self.why}")
        text = self.unit(grace)
        path = self.unit_path
        changed = not path.exists() or path.read_text() != text
        if changed:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o644)
            os.replace(tmp, path)
            self.systemctl("daemon-reload")
        self.systemctl("enable", f"{self.name}.service")
        return changed

    def installed(self) -> bool:
        return self.systemd and self.unit_path.exists()

    def unit_state(self) -> dict[str, str]:
        result = self.systemctl(
            "show", "-p", "ActiveState,SubState,MainPID,NRestarts", f"{self.name}.service",
            check=False,
        )  # fmt: skip
        return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)

    # ------------------------------------------------------------------ supervisor
    def supervisor_pid(self) -> int | None:
        try:
            pid = int((self.state / "supervisor.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def spawn_supervisor(self, grace: float) -> int:
        self.state.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = {
            "command": self.start_command(grace),
            "env": {"AL_CREDENTIALS_DIR": self.credentials} if self.credentials else {},
            "cwd": self.project,
            "state": str(self.state),
            "env_file": str(self.env_file),
        }
        with open(self.log_file, "ab") as log:
            child = subprocess.Popen(
                [sys.executable, "-m", "llamaherd_deploy.supervisor", json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.project,
                start_new_session=True,  # outlives this command and the SSH session
            )
        return child.pid

    @property
    def env_file(self) -> Path:
        """``KEY=VALUE`` lines the scheduler gets in its environment (``AL_DATABASE_URL`` with
        a password, a provider's key variable): ``<base>/state/service.env`` of a deployment,
        ``.al/service.env`` of a project; optional, 0600, never synced by ``al push``."""
        return self.state / "service.env"

    @property
    def log_file(self) -> Path:
        return self.state / "scheduler.log"

    def log_size(self) -> int:
        try:
            return self.log_file.stat().st_size
        except OSError:
            return 0

    def log_tail(self, since: int, lines: int = 15) -> list[str]:
        """The scheduler's last log lines: the journal's, or ``.al/scheduler.log``'s after
        byte ``since`` (what this start wrote)."""
        if self.installed():
            unit = ["--user-unit" if self.mode == "user" else "-u", f"{self.name}.service"]
            result = subprocess.run(
                ["journalctl", *unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                capture_output=True,
                text=True,
            )
            return result.stdout.splitlines()
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(since)
                return fh.read().decode(errors="replace").splitlines()[-lines:]
        except OSError:
            return []

    # ------------------------------------------------------------------ start / stop
    def start(self, grace: float, timeout: float, echo: Callable[[str], None]) -> dict[str, Any]:
        """Start the scheduler (the unit, installed or refreshed first, or a supervisor) and
        wait until its control API answers. Returns its ``scheduler.json``."""
        running = scheduler_info(self.state)
        if running:
            echo(f"the scheduler already runs: pid {running['pid']}, {running['url']}")
            return running
        log_start = self.log_size()
        if self.systemd:
            if self.install(grace):
                echo(f"installed {self.unit_path}")
            restarts = self.unit_state().get("NRestarts", "0")
            self.systemctl("start", f"{self.name}.service")
            alive: Callable[[], bool] = lambda: self._unit_alive(restarts)  # noqa: E731
            how = f"systemd unit {self.name}.service"
        else:
            supervisor = self.spawn_supervisor(grace)
            alive = lambda: pid_alive(supervisor)  # noqa: E731
            how = f"supervisor pid {supervisor} (log: .al/scheduler.log)"
        try:
            info = self._wait_started(alive, timeout)
        except LlamaherdError:
            for line in self.log_tail(log_start):
                echo(f"  | {line}")
            self.stop(timeout=STOP_MARGIN, echo=lambda _: None)
            raise
        echo(f"the scheduler runs: pid {info['pid']}, {info['url']} ({how})")
        return info

    def _unit_alive(self, restarts_before: str) -> bool:
        state = self.unit_state()
        return (
            state.get("ActiveState") in ("active", "activating")
            and state.get("NRestarts", "0") == restarts_before
            and state.get("SubState") != "auto-restart"
        )

    def _wait_started(self, alive: Callable[[], bool], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = scheduler_info(self.state)
            if info:
                # The health call needs the token too: being local proves nothing.
                client = ControlClient(info["url"], control_token(self.state), pid=info["pid"])
                try:
                    client.get("/control/health")
                    return info
                except LlamaherdError:
                    pass
                finally:
                    client.close()
            if not alive():
                raise CommandFailed("the scheduler exited while starting (its log is above)")
            time.sleep(0.2)
        raise CommandFailed(f"the scheduler did not come up within {timeout:g} s")

    def stop(self, timeout: float, echo: Callable[[str], None]) -> bool:
        """Stop whatever runs this project's scheduler: the unit, the supervisor, or a
        scheduler started by hand. Active runs get the scheduler's grace period. False when
        nothing ran."""
        stopped = False
        if self.installed() and self.unit_state().get("ActiveState") in ("active", "activating"):
            echo(f"stopping {self.name}.service")
            self.systemctl("stop", f"{self.name}.service")
            stopped = True
        supervisor = self.supervisor_pid()
        if supervisor:
            echo(f"stopping the supervisor (pid {supervisor})")
            os.kill(supervisor, signal.SIGTERM)
            _wait_gone(supervisor, timeout, "the supervisor")
            stopped = True
        running = scheduler_info(self.state)
        if running:
            echo(f"stopping the scheduler (pid {running['pid']})")
            client = ControlClient.find(self._project())
            if client is not None:
                with client:
                    client.post("/control/stop")
            _wait_gone(int(running["pid"]), timeout, "the scheduler")
            stopped = True
        return stopped

    def _project(self) -> Any:
        from llamaherd.api import load_project

        return load_project(Path(self.project))


def _wait_gone(pid: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise CommandFailed(f"{what} (pid {pid}) did not stop within {timeout:g} s")
        time.sleep(0.1)


def _quote(arg: str, *, command: bool = True) -> str:
    """One systemd word: ``%`` escaped (and ``$`` in a command line, where systemd expands
    variables), quoted when it has spaces or quotes."""
    arg = arg.replace("%", "%%")
    if command:
        arg = arg.replace("$", "$$")
    if re.search(r'[\s"\\\']', arg):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg

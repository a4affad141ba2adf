"""``al service``: the systemd unit it writes, and the supervisor that stands in for systemd
where none runs (real processes: a crashed scheduler comes back, a stop is graceful)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from llamaherd_deploy.helper import service_mode

from llamaherd.api import pid_alive
from llamaherd.testing import wait_until


def scheduler_pid(state: Path) -> int | None:
    try:
        return json.loads((state / "scheduler.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def alive(pid: int | None) -> bool:
    return bool(pid) and pid_alive(pid)


def test_the_unit_restarts_on_failure_stops_gracefully_and_is_hardened(offline_project, tmp_path):
    offline_project.add_scripted_agent("greeter")
    result = offline_project.al("service", "install", "--print", "--grace", "45", check=True)
    unit = result.stdout
    root = offline_project.root
    lines = unit.splitlines()
    assert any(
        line.startswith("ExecStart=")
        and line.endswith(f"-m llamaherd --project {root} start --grace 45")
        for line in lines
    )
    for expected in ("Restart=on-failure", "RestartSec=5", "KillMode=process", "TimeoutStopSec=105",
                     "NoNewPrivileges=yes", "UMask=0077", f"WorkingDirectory={root}"):  # fmt: skip
        assert expected in lines, expected
    if os.geteuid() == 0:
        assert "ProtectSystem=full" in lines and "WantedBy=multi-user.target" in lines
    if shutil.which("systemd-analyze"):
        path = tmp_path / "llamaherd-test.service"
        path.write_text(unit)
        verify = subprocess.run(
            ["systemd-analyze", "verify", str(path)], capture_output=True, text=True
        )
        complaints = [line for line in verify.stderr.splitlines() if path.name in line]
        assert not complaints, complaints


def test_install_where_systemd_does_not_run_says_so(offline_project):
    if service_mode()["mode"] != "supervised":
        pytest.skip("systemd runs here")
    offline_project.add_scripted_agent("greeter")
    result = offline_project.al("service", "install")
    assert result.returncode == 1  # this machine cannot: an operation failure
    assert result.stderr.startswith("error: cannot install a systemd unit here: ")


@pytest.fixture
def supervised(offline_project):
    """The offline project, with whatever ``al service start`` left stopped at teardown."""
    if service_mode()["mode"] != "supervised":
        pytest.skip("systemd runs here: `al service start` would install a unit")
    offline_project.add_scripted_agent("greeter")
    state = offline_project.root / ".al"
    try:
        yield offline_project
    finally:
        offline_project.al("service", "stop", "--timeout", "30")
        for name in ("supervisor.pid", "scheduler.json"):
            try:
                pid = (
                    int((state / name).read_text())
                    if name.endswith(".pid")
                    else scheduler_pid(state)
                )
            except (OSError, ValueError):
                continue
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_supervisor_restarts_a_crashed_scheduler_and_stops_it_gracefully(supervised):
    state = supervised.root / ".al"
    state.mkdir()
    (state / "service.env").write_text(
        '# the scheduler\'s environment\nAL_TEST_MARK="from the file"\n'
    )
    started = supervised.al("service", "start", "--grace", "5", "--timeout", "60", check=True)
    first = scheduler_pid(state)
    assert f"the scheduler runs: pid {first}" in started.stdout
    environ = Path(f"/proc/{first}/environ").read_bytes().split(b"\0")
    assert b"AL_TEST_MARK=from the file" in environ
    supervisor = int((state / "supervisor.pid").read_text())
    assert alive(supervisor) and alive(first)
    assert "already runs" in supervised.al("service", "start", check=True).stdout

    os.kill(first, signal.SIGKILL)  # a crash: the supervisor starts a new one after RestartSec
    second = wait_until(
        lambda: (pid := scheduler_pid(state)) != first and alive(pid) and pid, 30,
        what="a restarted scheduler",
    )  # fmt: skip
    assert alive(supervisor)
    status = supervised.al("service", "status", check=True).stdout
    assert f"supervisor: pid {supervisor}" in status and f"scheduler: pid {second}" in status
    assert "restarting it in 5 s" in (state / "scheduler.log").read_text()

    stopped = supervised.al("service", "stop", check=True)
    assert f"stopping the supervisor (pid {supervisor})" in stopped.stdout
    assert not alive(supervisor) and not alive(second)
    assert not (state / "supervisor.pid").exists() and not (state / "scheduler.json").exists()
    assert "the scheduler was not running" in supervised.al("service", "stop", check=True).stdout


def test_a_scheduler_that_cannot_come_up_is_not_retried(supervised):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        supervised.write("config.toml", supervised.root.joinpath("config.toml").read_text().replace(
            "port = 0", f"port = {port}"
        ))  # fmt: skip
        result = supervised.al("service", "start", "--timeout", "60")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: the scheduler exited while starting (its log is above)"
    assert f"cannot listen on 127.0.0.1:{port}" in result.stdout  # the log's tail, shown
    assert "before it came up; not restarting it" in result.stdout
    assert not (supervised.root / ".al" / "supervisor.pid").exists()

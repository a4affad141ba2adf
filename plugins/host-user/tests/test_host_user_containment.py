"""Timeouts, kill, pause/resume, cleanup, orphans and attach, with cgroups and without."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest
from llamaherd_host_user import runtime as runtime_module
from llamaherd_host_user import sandbox as sandbox_module
from llamaherd_host_user.containment import CgroupContainment, ProcContainment
from llamaherd_host_user.runtime import HostUserRuntime

from llamaherd.testing import service_unavailable, wait_until

pytestmark = pytest.mark.root

# Starts a background grandchild and a double-forked setsid daemon; each writes its pid.
SPAWN = (
    "sleep 300 & echo $! > child.pid; "
    "setsid sh -c 'sleep 300 & echo $! > daemon.pid' </dev/null >/dev/null 2>&1 & "
    "while [ ! -s daemon.pid ] || [ ! -s child.pid ]; do sleep 0.01; done"
)
COUNTER = "(i=0; while :; do i=$((i+1)); echo $i > c.tmp; mv c.tmp counter; sleep 0.01; done) >/dev/null 2>&1 &"


def pid_gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def pids(sandbox) -> list[int]:
    return [int(sandbox.get_file(name).strip()) for name in ("child.pid", "daemon.pid")]


def state(pid: int) -> str:
    """The process state letter of ``pid`` (R, S, T for stopped...), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def stop_pending(pid: int) -> bool:
    """Whether SIGSTOP waits on ``pid``: it stops the moment it leaves the kernel."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return False
    masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return any(mask & (1 << (signal.SIGSTOP - 1)) for mask in masks)


def stopped(sandbox, pid: int) -> bool:
    """Whether ``pid`` is held: its cgroup reports itself frozen, or (no cgroup) it is stopped.

    A shell that vforked a child the SIGSTOP caught before its exec waits in the kernel ("D")
    until that child goes on, with its own SIGSTOP pending: held as surely as a "T".
    """
    if isinstance(sandbox.containment, CgroupContainment):
        events = (sandbox.containment.path / "cgroup.events").read_text()
        return "frozen 1" in events.splitlines()
    return state(pid) == "T" or (state(pid) == "D" and stop_pending(pid))


def counter(sandbox) -> int:
    return int(sandbox.get_file("counter").strip() or 0)


@pytest.fixture(params=["cgroup", "proc"])
def containment(request, monkeypatch):
    """Run each test with cgroup containment and with the /proc fallback."""
    if request.param == "proc":
        monkeypatch.setattr(CgroupContainment, "create", classmethod(lambda cls, run_id: None))
    elif CgroupContainment.create("probe") is None:
        service_unavailable("cgroup2", "no cgroup of a run can be made")
    else:
        CgroupContainment.create("probe").remove()
    return request.param


def test_containment_kind(start, containment):
    sandbox = start()
    expected = CgroupContainment if containment == "cgroup" else ProcContainment
    assert isinstance(sandbox.containment, expected)


def test_call_timeout_kills_grandchildren_and_daemons(start, containment):
    sandbox = start()
    result = sandbox.exec(SPAWN + "; echo started; sleep 300", timeout=1.0)
    assert result.timed_out and result.exit_code == 124
    assert "started" in result.output
    assert result.duration < 60, "ended by its timeout, not by the 300 s sleep"
    child, daemon = pids(sandbox)
    if containment == "proc":
        # Without cgroups a call timeout reaches the call's process group only.
        assert pid_gone(child)
        sandbox.kill()
    assert all(pid_gone(pid) for pid in (child, daemon))


def test_kill_ends_every_process_of_the_run(start, containment):
    sandbox = start()
    assert sandbox.exec(SPAWN).exit_code == 0
    child, daemon = pids(sandbox)
    assert not pid_gone(child) and not pid_gone(daemon)  # the call returned, they live on
    sandbox.kill()
    assert pid_gone(child) and pid_gone(daemon)
    assert sandbox.alive()  # files stay until cleanup
    assert sandbox.exec("echo again").output == "again\n"


def test_background_output_does_not_hold_exec(start, containment):
    sandbox = start()
    result = sandbox.exec("sleep 30 & echo quick")
    assert result.output == "quick\n" and result.exit_code == 0
    assert result.duration < 15, "returned long before the background sleep ends"


def test_pause_stops_and_resume_continues_everything(start, containment):
    sandbox = start()
    sandbox.exec(COUNTER + " echo $! > counter.pid")
    wait_until(lambda: counter(sandbox) > 0, what="counting", ignore=(OSError,))
    loop = int(sandbox.get_file("counter.pid"))
    sandbox.pause()
    # Stopped for good, so the count cannot move: nothing to sleep through to show it.
    try:
        wait_until(lambda: stopped(sandbox, loop), what="the counting loop to stop")
    except AssertionError as exc:  # seen once under CI load: say what the run looked like
        found = {pid: state(pid) for pid in sandbox.containment.pids()}
        raise AssertionError(f"{exc}: loop {loop} is {state(loop)!r}; the run's {found}") from None
    frozen = counter(sandbox)
    assert stopped(sandbox, loop) and counter(sandbox) == frozen
    sandbox.resume()
    wait_until(lambda: counter(sandbox) > frozen, what="counting to go on")


def test_cleanup_removes_workdir_credentials_and_processes(start, containment):
    sandbox = start(credentials={"github_token/default": {"token": "t"}})
    sandbox.exec(SPAWN)
    child, daemon = pids(sandbox)
    creds = Path(sandbox.env["AL_CREDENTIALS_PATH"])
    sandbox.cleanup()
    assert not Path(sandbox.workdir).exists() and not creds.exists()
    assert pid_gone(child) and pid_gone(daemon)
    assert not sandbox.alive()


def test_keep_workdir_keeps_it_but_not_credentials(start):
    sandbox = start(credentials={"github_token/default": {"token": "t"}}, keepWorkdir=True)
    sandbox.exec("echo result > out.txt")
    creds = Path(sandbox.env["AL_CREDENTIALS_PATH"])
    sandbox.cleanup()
    assert Path(sandbox.workdir, "out.txt").read_text() == "result\n"
    assert not creds.exists()
    # A kept working dir is not an orphan: the next scheduler start leaves it alone.
    HostUserRuntime().cleanup_orphans(set())
    assert Path(sandbox.workdir).exists()
    shutil.rmtree(sandbox.workdir)


def test_orphans_of_dead_runs_are_removed(start, containment):
    live, dead = start(), start()
    dead.exec(SPAWN)
    child, daemon = pids(dead)
    removed = HostUserRuntime().cleanup_orphans({live.id})
    assert removed >= 1
    assert not Path(dead.workdir).exists() and not dead.layout.private.exists()
    assert pid_gone(child) and pid_gone(daemon)
    assert live.exec("true").exit_code == 0


def test_orphans_owned_by_another_running_scheduler_are_kept(start):
    sandbox = start()
    # Pretend a different live process (pid 1, with its real start time) owns the sandbox.
    from llamaherd_host_user.layout import process_start

    record = json.loads(sandbox.layout.owner_file.read_text())
    record.update(pid=1, start=process_start(1))
    sandbox.layout.owner_file.write_text(json.dumps(record))
    HostUserRuntime().cleanup_orphans(set())
    assert Path(sandbox.workdir).exists()


def test_attach_after_restart(start, containment, bin_dir):
    sandbox = start()
    sandbox.exec("echo kept > state.txt")
    sandbox.exec(SPAWN)
    child, daemon = pids(sandbox)
    sandbox.pause()
    handle = json.loads(json.dumps(sandbox.handle()))

    again = HostUserRuntime().attach(handle, None)  # a new runtime object: a restarted process
    assert again is not None and again.alive()
    again.resume()
    assert again.exec("cat state.txt").output == "kept\n"
    assert not pid_gone(daemon)
    again.kill()
    assert pid_gone(child) and pid_gone(daemon)
    again.cleanup()
    assert HostUserRuntime().attach(handle, None) is None
    assert HostUserRuntime().attach({}, None) is None


def test_runtime_is_registered_and_matches_the_protocols(start):
    from llamaherd.api import Runtime, Sandbox
    from llamaherd.plugins import registry

    runtime = registry().runtimes["host-user"]
    assert isinstance(runtime, HostUserRuntime) and isinstance(runtime, Runtime)
    assert isinstance(start(), Sandbox)
    assert set(runtime_module.SCHEMA) == {"run_as", "groups", "keepWorkdir"}


def test_same_user_runs_without_switching(start, runtime, make_agent):
    sandbox = start(run_as="root")
    assert sandbox.exec("id -u").output.strip() == str(os.getuid())
    assert not sandbox.identity.switch
    warnings = runtime.warnings(make_agent(run_as="root"))
    assert len(warnings) == 1 and "without isolation" in warnings[0]
    assert runtime.warnings(make_agent(name="other", run_as="al-test-agent")) == []


def test_background_process_survives_its_call_and_keeps_writing(start, containment):
    sandbox = start()
    sandbox.exec(
        "sh -c 'sleep 0.3; echo late; echo late; touch wrote; sleep 300' & echo $! > bg.pid"
    )
    pid = int(sandbox.get_file("bg.pid"))
    # It wrote after its call returned and lives on: no SIGPIPE although nobody reads it.
    wait_until(lambda: Path(sandbox.workdir, "wrote").exists(), what="the late writes")
    assert not pid_gone(pid)
    sandbox.kill()
    assert pid_gone(pid)


def test_kill_while_paused_and_from_another_thread(start, containment):
    sandbox = start()
    sandbox.exec(SPAWN)
    child, daemon = pids(sandbox)
    sandbox.pause()
    sandbox.kill()
    assert pid_gone(child) and pid_gone(daemon)
    assert sandbox.exec("echo fresh").output == "fresh\n"  # not left frozen
    timer = threading.Timer(0.3, sandbox.kill)
    timer.start()
    result = sandbox.exec("sleep 300")
    assert result.exit_code == 137 and result.duration < 60, "killed, not slept out"


def test_interrupt_ends_the_running_commands_and_keeps_the_sandbox(start, containment):
    sandbox = start()
    sandbox.exec("sleep 300 & echo $! > bg.pid")  # an earlier call's background process
    background = int(sandbox.get_file("bg.pid"))
    timer = threading.Timer(0.3, sandbox.interrupt)
    timer.start()
    result = sandbox.exec("sleep 301 & echo $! > child.pid; sleep 302")
    assert result.exit_code == 137 and result.duration < 60, "interrupted, not slept out"
    assert pid_gone(int(sandbox.get_file("child.pid")))  # what the call started: gone
    assert not pid_gone(background)  # the rest of the run: kept
    assert sandbox.exec("echo still usable").output == "still usable\n"
    sandbox.interrupt()  # nothing running: nothing to do


def test_get_file_of_a_fifo_times_out(start, monkeypatch):
    monkeypatch.setattr(sandbox_module, "FILE_TIMEOUT", 0.3)
    sandbox = start()
    sandbox.exec("mkfifo pipe")
    with pytest.raises(TimeoutError):
        sandbox.get_file("pipe")


class Killed(BaseException):
    """The scheduler dies (``kill -9``) here: nothing after this point of cleanup runs."""


@pytest.mark.parametrize("keep", [False, True])
def test_a_kill_at_any_point_of_cleanup_leaves_nothing_the_next_start_misses(
    start, monkeypatch, keep
):
    """The scheduler is killed after each single file or directory removal of a sandbox's
    cleanup in turn; the next start's orphan sweep removes what was left every time (the
    owner record used to go first, and a kill right after it leaked the working dir for
    good), and a working dir kept with keepWorkdir stays kept."""
    unlink, rmdir = os.unlink, os.rmdir
    step = 0
    while True:
        step += 1
        sandbox = start(credentials={"github_token/default": {"token": "t"}}, keepWorkdir=keep)
        sandbox.exec("echo result > out.txt")
        removals = iter(range(step))

        def removal(real, removals=removals):
            def remove(*args, **kwargs):
                if next(removals, None) is None:
                    raise Killed
                return real(*args, **kwargs)

            return remove

        monkeypatch.setattr(os, "unlink", removal(unlink))
        monkeypatch.setattr(os, "rmdir", removal(rmdir))
        try:
            sandbox.cleanup()
            finished = True
        except Killed:
            finished = False
        finally:
            monkeypatch.setattr(os, "unlink", unlink)
            monkeypatch.setattr(os, "rmdir", rmdir)
        HostUserRuntime().cleanup_orphans(set())
        assert not sandbox.layout.private.exists(), step
        assert Path(sandbox.workdir).exists() == keep, step
        if keep:
            assert Path(sandbox.workdir, "out.txt").read_text() == "result\n"
            shutil.rmtree(sandbox.workdir)
        if finished:
            break
    assert step > 5  # it went through the whole cleanup, one removal at a time


@pytest.mark.parametrize("killed_in", ["write_owner", "rename"])
def test_a_start_killed_before_its_area_is_in_place_is_retried_or_swept(
    start, monkeypatch, killed_in
):
    """The scheduler dies while a run's private area is made aside: before its owner record
    is written, or before the rename. Starting the same run again works (the crash test's
    recovered run once failed 'File exists'), and a run never started again is swept: at
    once when its maker is dead, after a grace when no record says who made it."""
    from llamaherd_host_user import staging
    from llamaherd_host_user.layout import Layout, runs_base

    def killed(*args, **kwargs):
        raise Killed

    target = (Layout, "write_owner") if killed_in == "write_owner" else (staging.os, "rename")
    run_ids = [f"worker-{os.urandom(6).hex()}" for _ in range(2)]
    with monkeypatch.context() as patch:
        patch.setattr(*target, killed)
        for run_id in run_ids:
            with pytest.raises(Killed):
                start(run_id=run_id)
    retried, swept = (Layout(runs_base(), run_id) for run_id in run_ids)
    assert retried.aside.is_dir() and swept.aside.is_dir()

    assert start(run_id=run_ids[0]).exec("echo again").output == "again\n"
    assert not retried.aside.exists()

    HostUserRuntime().cleanup_orphans({run_ids[0]})
    if killed_in == "write_owner":  # no record: its maker may be about to write it
        assert swept.aside.is_dir() and swept.workdir.is_dir()
        old = swept.aside.stat().st_mtime - runtime_module.ASIDE_GRACE - 1
        os.utime(swept.aside, (old, old))
        HostUserRuntime().cleanup_orphans({run_ids[0]})
    assert not swept.aside.exists() and not swept.workdir.exists()
    assert retried.private.is_dir()  # the live run's area is not the sweep's

"""The ssh sandbox against a real sshd on 127.0.0.1: commands, files, credentials, the
gateway forward, kills and timeouts checked with ``ps`` on the remote side, no files left."""

from __future__ import annotations

import os
import shutil
import stat
import time

import pytest

from llamaherd.api import SandboxLost, SshError, StagedFile, load_project
from llamaherd.testing import wait_until


def test_commands_run_in_a_private_dir_with_the_run_env(host, start) -> None:
    sandbox = start(host.runtime())
    assert sandbox.workdir == f"{host.home}/.al-runs/worker-0001/work"
    result = sandbox.exec('pwd; echo "$AL_RUN_ID $AL_RUN_TOKEN"; id -un; al-hello; echo err >&2')
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        sandbox.workdir,
        "worker-0001 t0ken-worker-0001",
        host.name,
        "hello from worker-0001",
        "err",
    ]
    assert sandbox.exec("exit 3").exit_code == 3
    # a relative cwd is under the working dir; the call's env comes on top of the run's
    sandbox.exec("mkdir sub")
    found = sandbox.exec("pwd; echo $EXTRA", cwd="sub", env={"EXTRA": 'it\'s "quoted" $x'})
    assert found.output.splitlines() == [f"{sandbox.workdir}/sub", 'it\'s "quoted" $x']


def test_output_is_streamed_by_line(host, start) -> None:
    sandbox = start(host.runtime())
    seen: list[str] = []
    result = sandbox.exec(
        "for i in 1 2 3; do echo line $i; done; printf tail", on_output=seen.append
    )
    assert seen == ["line 1", "line 2", "line 3", "tail"]
    assert result.output == "line 1\nline 2\nline 3\ntail"


def test_files_move_over_the_connection(host, start) -> None:
    sandbox = start(host.runtime())
    payload = bytes(range(256)) * 1000
    sandbox.put_file("dir/data.bin", payload, 0o600)
    assert sandbox.get_file("dir/data.bin") == payload
    info = (host.home / ".al-runs/worker-0001/work/dir/data.bin").stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == host.uid
    with pytest.raises(FileNotFoundError):
        sandbox.get_file("missing.txt")


def test_credentials_are_staged_0700_and_removed_with_the_run(host, start) -> None:
    files = (StagedFile("github_token/default/token", b"ghp_secret\n", 0o400),)
    sandbox = start(host.runtime(), files=files)
    run_dir = host.home / ".al-runs/worker-0001"
    creds = run_dir / "credentials"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    token = creds / "github_token/default/token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o400 and token.stat().st_uid == host.uid
    result = sandbox.exec('cat "$AL_CREDENTIALS_PATH/github_token/default/token"; echo $CRED_ROOT')
    assert result.output.splitlines() == ["ghp_secret", str(creds)]
    sandbox.cleanup()
    assert not run_dir.exists()
    assert host.files(".al-runs") == []  # and the runs dir it made is gone too


def test_the_gateway_is_forwarded_into_the_run_dir(host, start, gateway_stub) -> None:
    sandbox = start(host.runtime())
    socket_path = f"{host.home}/.al-runs/worker-0001/gw.sock"
    result = sandbox.exec(
        'python3 -c "import os,socket; s=socket.socket(socket.AF_UNIX); '
        "s.connect(os.environ['AL_GATEWAY_URL'][7:]); s.sendall(b'ping'); print(s.recv(9))\""
    )
    assert result.output.strip() == "b'pong'", result.output
    assert gateway_stub.received == [b"ping"]
    assert sandbox.env["AL_GATEWAY_URL"] == f"unix://{socket_path}"


def test_a_timeout_kills_the_command_group_and_what_left_it(host, start) -> None:
    sandbox = start(host.runtime())
    began = time.monotonic()
    result = sandbox.exec(
        "sleep 300 & setsid sh -c 'sleep 301' & echo started; sleep 302", timeout=1.5
    )
    assert result.timed_out and result.exit_code == 124
    assert "started" in result.output
    assert time.monotonic() - began < 10
    wait_until(lambda: "sleep 30" not in host.ps(), 10, what="no sleep left on the host")


def test_kill_ends_every_process_of_the_run(host, start) -> None:
    sandbox = start(host.runtime())
    sandbox.exec("nohup setsid sleep 400 >/dev/null 2>&1 & sleep 401 >/dev/null 2>&1 &")
    assert "sleep 40" in host.ps()
    sandbox.kill()
    wait_until(lambda: "sleep 40" not in host.ps(), 10, what="the run's processes gone")
    sandbox.cleanup()
    # nothing of the run is left on the host, but the user's own login session
    wait_until(lambda: not [line for line in host.ps().splitlines() if "sshd" not in line], 10)


def test_pause_and_resume_stop_and_continue_the_run(host, start) -> None:
    sandbox = start(host.runtime())
    sandbox.exec("(while :; do date +%s%N >> ticks; sleep 0.05; done) >/dev/null 2>&1 &")
    wait_until(lambda: sandbox.exec("wc -l < ticks").output.strip() not in ("", "0"), 10)
    sandbox.pause()
    before = sandbox.exec("wc -l < ticks").output
    time.sleep(0.5)  # nothing may tick while paused: the absence of ticks is the point
    assert sandbox.exec("wc -l < ticks").output == before
    sandbox.resume()
    wait_until(lambda: sandbox.exec("wc -l < ticks").output != before, 10, what="ticking again")


def test_interrupt_kills_running_commands_and_keeps_the_sandbox(host, start) -> None:
    import threading

    sandbox = start(host.runtime())
    results = []
    thread = threading.Thread(target=lambda: results.append(sandbox.exec("sleep 500")))
    thread.start()
    wait_until(lambda: "sleep 500" in host.ps(), 10)
    sandbox.interrupt()
    thread.join(10)
    assert results and results[0].exit_code != 0
    assert sandbox.exec("echo still here").output == "still here\n"


def test_a_lost_host_raises_sandbox_lost(host, start, sshd) -> None:
    sandbox = start(host.runtime())
    assert sandbox.exec("true").exit_code == 0
    sshd.stop()
    with pytest.raises(SandboxLost, match="127.0.0.1"):
        sandbox.exec("echo hello")


def test_attach_finds_the_run_after_a_restart(host, runtime, make_agent, spec_for) -> None:
    from llamaherd_ssh.runtime import SshRuntime

    agent = make_agent(host.runtime())
    sandbox = runtime.start(spec_for(agent))
    sandbox.put_file("note.txt", b"kept")
    again = SshRuntime()  # a new scheduler process: a new connection
    try:
        found = again.attach(sandbox.handle(), spec_for(agent))
        assert found is not None and found.get_file("note.txt") == b"kept"
        assert found.exec("al-hello").output == "hello from worker-0001\n"
        found.cleanup()
        assert again.attach(sandbox.handle(), None) is None
    finally:
        again.masters.close()


def test_orphans_of_the_project_are_removed_at_start(host, start, runtime, tmp_path) -> None:
    sandbox = start(host.runtime())
    sandbox.exec("setsid sleep 700 >/dev/null 2>&1 &")
    project = load_project(tmp_path / "project-worker")
    assert runtime.cleanup_orphans({sandbox.id}, project) == 0  # live: kept
    other = load_project(tmp_path / "project-worker")
    other.root = tmp_path / "elsewhere"  # the same hosts, another project: never touched
    assert runtime.cleanup_orphans(set(), other) == 0
    assert "sleep 700" in host.ps()
    assert runtime.cleanup_orphans(set(), project) == 1
    wait_until(lambda: "sleep 700" not in host.ps(), 10, what="the orphan's processes gone")
    assert host.files(".al-runs") == []


def _runs_on(host) -> list[str]:
    """The run dirs on ``host`` (their names)."""
    return [path.split("/")[1] for path in host.files(".al-runs") if path.count("/") == 1]


def test_a_lost_runs_dir_goes_before_the_next_run_on_its_host(host, start, sshd) -> None:
    """The host is lost mid-run, so the run's cleanup cannot reach it: its dir, with its copy
    of the credential, stayed there while the same scheduler ran new runs on the host."""
    token = StagedFile("fake_token/default/token", b"s3cret-of-the-lost-run\n", 0o400)
    lost = start(host.runtime(), files=(token,), run_id="worker-lost")
    lost.exec("setsid sleep 703 >/dev/null 2>&1 &")
    sshd.stop()
    lost.kill()  # a warning: the host cannot be reached
    with pytest.raises(SshError, match="unreachable"):
        lost.cleanup()
    sshd.start()  # the host is back
    assert _runs_on(host) == ["worker-lost"]
    assert "sleep 703" in host.ps()  # what ran outside the killed sessions runs on too
    start(host.runtime(), run_id="worker-next")
    assert _runs_on(host) == ["worker-next"]  # gone before the new run's dir was made
    wait_until(lambda: "sleep 703" not in host.ps(), 10, what="the lost run's processes gone")


def test_a_lost_host_that_stays_down_keeps_its_leftover_for_later(host, start, sshd) -> None:
    lost = start(host.runtime(), run_id="worker-lost")
    sshd.stop()
    with pytest.raises(SshError):
        lost.cleanup()
    with pytest.raises(SandboxLost, match="unreachable"):
        start(host.runtime(), run_id="worker-refused")  # still down: nothing lost meanwhile
    sshd.start()
    start(host.runtime(), run_id="worker-next")
    assert _runs_on(host) == ["worker-next"]


def _deep_cwd(host, letter: str) -> str:
    """A cwd of ``host``'s login so deep that a run dir's socket path would pass the limit."""
    deep = host.home / (letter * 60) / (letter * 60)
    deep.mkdir(parents=True)
    for folder in (deep.parent, deep):
        shutil.chown(folder, host.name)
    return str(deep)


def test_a_long_run_dir_gets_its_socket_in_tmp_and_cleanup_removes_it(
    host, start, gateway_stub
) -> None:
    sandbox = start(host.runtime(cwd=_deep_cwd(host, "d")))
    assert sandbox.socket.startswith("/tmp/al-gw-") and sandbox.socket.endswith(".sock")
    assert stat.S_ISSOCK(os.stat(sandbox.socket).st_mode)
    result = sandbox.exec(
        'python3 -c "import os,socket; s=socket.socket(socket.AF_UNIX); '
        "s.connect(os.environ['AL_GATEWAY_URL'][7:]); s.sendall(b'ping'); print(s.recv(9))\""
    )
    assert result.output.strip() == "b'pong'", result.output
    assert os.readlink(f"{sandbox.run_dir}/gw.sock") == sandbox.socket
    sandbox.cleanup()
    assert not os.path.lexists(sandbox.socket)
    assert not os.path.exists(sandbox.run_dir)


def test_a_crashed_runs_tmp_socket_goes_with_the_orphan_sweep(
    host, start, runtime, tmp_path
) -> None:
    sandbox = start(host.runtime(cwd=_deep_cwd(host, "f")))
    assert os.path.lexists(sandbox.socket)
    project = load_project(tmp_path / "project-worker")
    assert runtime.cleanup_orphans(set(), project) == 1  # as the next start does
    assert not os.path.lexists(sandbox.socket)

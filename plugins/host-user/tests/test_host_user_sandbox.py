"""Executing as the agent user: identity, cwd, env, credentials, files and isolation."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from llamaherd.api import CredentialStore

pytestmark = pytest.mark.root


def test_exec_runs_as_agent_user_in_its_workdir(start, agent_users):
    agent, _ = agent_users
    sandbox = start()
    result = sandbox.exec("id -u; id -G; pwd")
    uid, groups, cwd = result.output.split("\n")[:3]
    assert result.exit_code == 0
    assert int(uid) == agent.pw_uid
    assert "0" not in groups.split()  # root's groups are dropped
    assert cwd == sandbox.workdir == f"/tmp/al-runs/{sandbox.id}"
    info = os.stat(sandbox.workdir)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (agent.pw_uid, 0o700)
    base = os.stat("/tmp/al-runs")
    assert (base.st_uid, stat.S_IMODE(base.st_mode)) == (0, 0o711)


def test_no_new_privileges(start):
    sandbox = start()
    assert "NoNewPrivs:\t1" in sandbox.exec("cat /proc/self/status").output
    # A setuid-root binary the agent can run does not make it root.
    directory = Path("/tmp") / f"al-test-suid-{os.getpid()}"
    directory.mkdir(mode=0o755, exist_ok=True)
    try:
        suid = directory / "id"
        shutil.copy("/usr/bin/id", suid)
        suid.chmod(0o4755)
        assert "euid=0" not in sandbox.exec(f"{suid}").output
    finally:
        shutil.rmtree(directory)


def test_exec_cwd_exit_code_and_streamed_lines(start):
    sandbox = start()
    lines: list[str] = []
    result = sandbox.exec(
        "mkdir sub && cd sub && pwd; echo err >&2; exit 3", on_output=lines.append
    )
    assert result.exit_code == 3 and not result.timed_out
    assert lines == [f"{sandbox.workdir}/sub", "err"]
    assert sandbox.exec("pwd", cwd=f"{sandbox.workdir}/sub").output.strip().endswith("/sub")
    missing = sandbox.exec("true", cwd="/nonexistent-dir")
    assert missing.exit_code != 0 and "can't cd" in missing.output


def test_env_is_built_from_scratch(start, monkeypatch, agent_user):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-scheduler-secret")
    monkeypatch.setenv("AL_SCHEDULER_ONLY", "x")
    sandbox = start(env={"AL_AGENT": "worker", "AL_GATEWAY_URL": "http://127.0.0.1:1"})
    env = dict(
        line.split("=", 1) for line in sandbox.exec("env").output.splitlines() if "=" in line
    )
    assert "sk-ant-scheduler-secret" not in sandbox.exec("env; cat /proc/self/environ").output
    assert "ANTHROPIC_API_KEY" not in env and "AL_SCHEDULER_ONLY" not in env
    assert env["HOME"] == sandbox.workdir and env["USER"] == agent_user
    assert env["TERM"] == "dumb" and env["AL_RUN_ID"] == sandbox.id
    assert env["AL_GATEWAY_URL"] == "http://127.0.0.1:1"
    assert env["AL_TEST_CRED_ROOT"] == env["AL_CREDENTIALS_PATH"]
    assert sandbox.exec("env", env={"EXTRA": "y"}).output.count("EXTRA=y") == 1
    # The commands dir came from a root-only path and is first on PATH.
    assert sandbox.exec("al-hello").output.strip() == f"hello from {sandbox.id}"


def test_credentials_staged_private_and_only_declared(start, agent_users):
    agent, _ = agent_users
    sandbox = start(credentials={"github_token/default": {"token": "ghp_secret1"}})
    root = sandbox.exec("printf %s $AL_CREDENTIALS_PATH").output
    token = Path(root) / "github_token" / "default" / "token"
    assert sandbox.exec(f"cat {token}").output == "ghp_secret1\n"
    info = token.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (agent.pw_uid, 0o400)
    assert sorted(os.listdir(root)) == ["github_token"]
    assert stat.S_IMODE(Path(root).stat().st_mode) == 0o700


def test_other_user_cannot_read_a_runs_workdir_or_credentials(start, other_user):
    mine = start(credentials={"github_token/default": {"token": "ghp_secret2"}})
    mine.exec("echo private > notes.txt")
    other = start(run_as=other_user)
    creds = mine.env["AL_CREDENTIALS_PATH"]
    for command in (
        f"cat {mine.workdir}/notes.txt",
        f"ls {mine.workdir}",
        f"cat {creds}/github_token/default/token",
        f"ls {creds}",
        "ls /tmp/al-runs",
    ):
        result = other.exec(command)
        assert result.exit_code != 0, command
        assert "Permission denied" in result.output, command
    with pytest.raises(PermissionError):
        other.get_file(f"{mine.workdir}/notes.txt")
    with pytest.raises(PermissionError):
        other.put_file(f"{mine.workdir}/planted.txt", b"x")


def test_agent_cannot_read_the_credential_store(start, monkeypatch):
    # A store outside /root, in a world-traversable dir, as AL_CREDENTIALS_DIR allows.
    parent = Path("/tmp") / f"al-test-store-{os.getpid()}"
    parent.mkdir(mode=0o755, exist_ok=True)
    parent.chmod(0o755)
    try:
        monkeypatch.setenv("AL_CREDENTIALS_DIR", str(parent / "credentials"))
        store = CredentialStore()
        store.write("github_token", "default", {"token": "ghp_store_secret"})
        sandbox = start()
        field = store.path("github_token") / "token"
        for command in (f"cat {field}", f"ls {store.root}", f"ls {store.root}/github_token"):
            result = sandbox.exec(command)
            assert result.exit_code != 0 and "Permission denied" in result.output, command
        assert "ghp_store_secret" not in sandbox.exec(f"cat {field}; grep -r ghp_ {parent}").output
    finally:
        shutil.rmtree(parent)


def test_put_and_get_file_as_agent_user(start, agent_users):
    agent, _ = agent_users
    sandbox = start()
    sandbox.put_file("deep/dir/a.txt", b"data\n", mode=0o640)
    path = Path(sandbox.workdir, "deep/dir/a.txt")
    info = path.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (agent.pw_uid, 0o640)
    assert sandbox.get_file("deep/dir/a.txt") == b"data\n"
    assert sandbox.get_file(str(path)) == b"data\n"
    # A symlink the agent plants does not let the scheduler read or write root's files.
    sandbox.exec("ln -s /root/.bashrc leak; ln -s /etc/planted out")
    with pytest.raises(PermissionError):
        sandbox.get_file("leak")
    with pytest.raises(PermissionError):
        sandbox.put_file("out", b"x")
    assert not Path("/etc/planted").exists()
    with pytest.raises(FileNotFoundError):
        sandbox.get_file("missing.txt")


def test_endless_output_is_bounded(start, monkeypatch):
    from llamaherd import execoutput

    monkeypatch.setattr(execoutput, "MAX_OUTPUT", 1000)
    sandbox = start()
    seen: list[str] = []
    result = sandbox.exec("echo first; seq 1 20000; echo last", on_output=seen.append)
    assert len(seen) == 20002  # every line is streamed
    assert result.output.startswith("first\n1\n") and result.output.endswith("19999\n20000\nlast\n")
    assert "characters of output omitted" in result.output and len(result.output) < 1200


def test_runs_link_one_copy_of_the_commands_and_run_them(start, bin_dir):
    """Each run's ``bin`` holds hard links to one copy of the commands per runs base (copying
    them for every run was a tenth of its start), which its user runs and cannot change."""
    first, second = start(), start()
    names = sorted(entry.name for entry in os.scandir(bin_dir) if entry.is_file())
    bins = [Path(sandbox.env["PATH"].split(":")[0]) for sandbox in (first, second)]
    assert [sorted(os.listdir(b)) for b in bins] == [names, names]
    for name in names:
        one, two = (os.stat(b / name) for b in bins)
        assert (one.st_ino, one.st_dev) == (two.st_ino, two.st_dev)
        assert stat.S_IMODE(one.st_mode) == 0o755 and one.st_uid == os.geteuid()
        assert (bins[0] / name).read_bytes() == (bin_dir / name).read_bytes()
    assert first.exec("al-hello").output.startswith(f"hello from {first.id}")
    changed = first.exec(f"echo x >> {bins[0]}/al-hello || rm -f {bins[0]}/al-hello")
    assert changed.exit_code != 0  # the run's user can neither change nor remove them
    assert (bins[1] / "al-hello").read_bytes() == (bin_dir / "al-hello").read_bytes()

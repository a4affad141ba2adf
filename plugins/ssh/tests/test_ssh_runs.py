"""Agents with ``[runtime] type = "ssh"`` run end to end against a real sshd on 127.0.0.1:
tool calls, files, credentials, hooks and the language-skill commands on the host; the model
session (and its key) stays here; a timeout leaves nothing running there, a finished run no
files; a crashed scheduler's leftovers go at the next start; connection failures are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from llamaherd.credentials import CredentialStore
from llamaherd.testing import FAKES, OfflineProject, wait_until

MODEL_KEY = "sk-model-key-never-leaves-0123456789"
TOKEN = "fake-token-for-the-remote-run-42"

SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
pwd; id -un; cat pre.txt
echo "token=$FAKE_TOKEN file=$(cat "$AL_CREDENTIALS_PATH/fake_token/default/token")"
env | grep -c sk-model-key || true
cd sub 2>/dev/null || mkdir sub && cd sub && setenv WHERE on-the-host-7
'''}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = "pwd; echo where=$WHERE"}}]

[[turns]]
tool_calls = [{name = "write_file", arguments = {path = "note.txt", content = "written remotely"}}]

[[turns]]
tool_calls = [{name = "read_file", arguments = {path = "note.txt"}}]

[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
al-status "working on $(hostname)" && al-return '{"ok": true}'
'''}}]

[[turns]]
text = "done"
"""


def ssh_project(
    root: Path, host, runtime: dict | None = None, body: str = "Do the thing.", **agent
) -> OfflineProject:
    """A project whose agent ``worker`` runs on ``host`` (scripted model, fake_token)."""
    project = OfflineProject(
        root, env={"AL_PLUGINS": FAKES, "OPENAI_API_KEY": MODEL_KEY}, creds=root.parent / "creds"
    )
    config = {
        "models": ["scripted"],
        "credentials": ["fake_token"],
        "runtime": runtime or host.runtime(),
        **agent,
    }
    project.add_agent("worker", tomli_w.dumps(config), body=body)
    CredentialStore(project.creds).write("fake_token", "default", {"token": TOKEN})
    return project


def events(project: OfflineProject, target: str = "worker") -> list[dict]:
    logs = project.al("logs", target, "--json", check=True)
    return [json.loads(line) for line in logs.stdout.splitlines()]


def test_an_agent_runs_end_to_end_on_the_host(tmp_path, host) -> None:
    project = ssh_project(
        tmp_path / "project",
        host,
        body='Context: !`id -un` and !`cat "$AL_SHARED_PATH/conventions.md"`.',
        hooks={"pre": ["echo pre-hook > pre.txt"], "post": ["echo post-hook ran"]},
    )
    project.write("agents/worker/script.toml", SCRIPT)
    project.write("shared/conventions.md", "tabs, never spaces")
    run = project.al("run", "worker")
    assert run.returncode == 0, run.stdout + run.stderr
    found = events(project)
    outputs = [e["data"]["output"] for e in found if e["type"] == "tool_call"]
    workdir = f"{host.home}/.al-runs/"
    first = outputs[0].splitlines()
    assert first[0].startswith(workdir) and first[0].endswith("/work")
    assert first[1:4] == [host.name, "pre-hook", "token=*** file=***"]  # masked when stored
    assert first[4] == "0"  # the model key is nowhere in the remote environment
    # cwd and env kept between calls (a setenv value is masked when stored, as any)
    assert outputs[1].splitlines() == [f"{first[0]}/sub", "where=***"]
    assert outputs[3] == "written remotely"
    # !`command` context ran on the host, after hooks.pre, with the project's shared/ files
    context = [(e["data"]["command"], e["data"]["output"]) for e in found if e["type"] == "context"]
    assert context == [
        ("id -un", host.name),
        ('cat "$AL_SHARED_PATH/conventions.md"', "tabs, never spaces"),
    ]
    hooks = [e["data"] for e in found if e["type"] == "hook"]
    assert [(h["phase"], h["exit_code"]) for h in hooks] == [("pre", 0), ("post", 0)]
    store = project.store()
    try:
        final = store.runs(agent="worker")[0]
        assert final.state == "done" and final.return_value == {"ok": True}
        assert [m["text"] for m in store.status_messages(final.id)] == [
            f"working on {Path('/etc/hostname').read_text().strip()}"
        ]
    finally:
        store.close()
    # nothing of the run is left on the host: no files, no processes but the login sessions
    assert host.files(".al-runs") == []
    wait_until(lambda: not [p for p in host.ps().splitlines() if "sshd" not in p], 10)


TIMEOUT_SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
sleep 600 >/dev/null 2>&1 &
setsid sh -c 'sleep 601' >/dev/null 2>&1 &
echo started; sleep 602
'''}}]
"""


def test_a_timed_out_run_leaves_nothing_running_on_the_host(tmp_path, host, scheduler) -> None:
    project = ssh_project(tmp_path / "project", host, timeout=4)
    project.write("agents/worker/script.toml", TIMEOUT_SCRIPT)
    scheduler(project)
    result = project.al("run", "worker")  # follows the run on the scheduler until it ends
    assert result.returncode == 124 and "run timed out after 4 s" in result.stdout
    wait_until(lambda: "sleep 60" not in host.ps(), 15, what="the run's processes gone")
    wait_until(lambda: host.files(".al-runs") == [], 15, what="the run's files gone")


LONG_SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "echo begun > begun.txt; sleep 900"}}]
"""


def test_a_crashed_schedulers_leftovers_go_at_the_next_start(tmp_path, host, scheduler) -> None:
    project = ssh_project(tmp_path / "project", host)
    project.write("agents/worker/script.toml", LONG_SCRIPT)
    first = scheduler(project)
    project.al("run", "worker", "--no-follow", check=True)
    wait_until(lambda: "sleep 900" in host.ps(), 30, what="run begun")
    first.kill9()
    assert list(host.home.glob(".al-runs/*/work/begun.txt"))  # left behind with its files
    assert "sleep 900" in host.ps()  # and still running
    second = scheduler(project)
    # The new scheduler adopts the run (its sandbox is still there): the interrupted command
    # is answered as such, the run goes on to its end, and its sandbox goes with it.
    wait_until(lambda: "sleep 900" not in host.ps(), 30, what="leftover killed")
    wait_until(lambda: host.files(".al-runs") == [], 30, what="leftover removed")
    run = project.wait_run(lambda runs: runs[0].state != "running" and runs[0])
    assert run.state == "done", second.read_log()
    assert "adopted run" in second.read_log()


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        ("unknown host key", "the host key is not in {file} (ssh_options.UserKnownHostsFile)"),
        ("changed host key", "does not match the one in {file} (ssh_options.UserKnownHostsFile)"),
        ("refused key", "was refused"),
        ("unreachable", "unreachable: connect to host 127.0.0.1 port 1: Connection refused"),
    ],
)
def test_connection_failures_are_one_line_and_a_failed_run(
    tmp_path, host, problem, expected
) -> None:
    runtime = host.runtime()
    if problem == "unknown host key":
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        runtime["ssh_options"] = {"UserKnownHostsFile": str(empty)}
        expected = expected.format(file=empty)
    elif problem == "changed host key":
        other = tmp_path / "other"
        other.mkdir()
        import subprocess

        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other / "k")])
        wrong = tmp_path / "wrong_known_hosts"
        wrong.write_text(f"[127.0.0.1]:{host.server.port} {(other / 'k.pub').read_text()}")
        runtime["ssh_options"] = {"UserKnownHostsFile": str(wrong)}
        expected = expected.format(file=wrong)
    elif problem == "refused key":
        runtime["key_path"] = str(tmp_path / "nobody_key")
        import subprocess

        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", runtime["key_path"]])
    else:
        runtime["port"] = 1
    project = ssh_project(tmp_path / "project", host, runtime)
    run = project.al("run", "worker", timeout=60)
    assert run.returncode != 0
    store = project.store()
    try:
        final = store.runs(agent="worker")[0]
    finally:
        store.close()
    assert final.state == "error"
    assert expected in final.reason and "\n" not in final.reason, final.reason
    assert expected in run.stdout + run.stderr


@pytest.mark.parametrize("problem", ["unknown", "changed"])
def test_a_host_key_errors_suggested_fix_fixes_the_run(tmp_path, host, problem) -> None:
    """Issue 42 item 17: the fix the error suggests edits the known_hosts file the agent's
    ``ssh_options.UserKnownHostsFile`` names (not ~/.ssh/known_hosts): run as written (after
    the fingerprint check a person does), the next run connects."""
    import re
    import subprocess

    known = tmp_path / "agent_known_hosts"
    if problem == "changed":
        other = tmp_path / "other"
        other.mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other / "k")])
        known.write_text(f"[127.0.0.1]:{host.server.port} {(other / 'k.pub').read_text()}")
    else:
        known.write_text("")
    runtime = host.runtime()
    runtime["ssh_options"] = {"UserKnownHostsFile": str(known)}
    project = ssh_project(tmp_path / "project", host, runtime)
    failed = project.al("run", "worker", timeout=60)
    assert failed.returncode != 0
    said = failed.stdout + failed.stderr
    (fix,) = set(re.findall(r"\((ssh-key(?:gen|scan) [^()]*)\)", said))
    assert str(known) in fix and "~/.ssh/known_hosts" not in said
    subprocess.run(["bash", "-c", fix], check=True, capture_output=True)
    if problem == "changed":  # removed: now the host is unknown, and that fix adds it
        again = project.al("run", "worker", timeout=60)
        (fix,) = set(re.findall(r"\((ssh-keyscan [^()]*)\)", again.stdout + again.stderr))
        subprocess.run(["bash", "-c", fix], check=True, capture_output=True)
    done = project.al("run", "worker", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


LIST_SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = 'ls "$HOME/.al-runs"'}}]

[[turns]]
text = "done"
"""


def test_a_host_lost_mid_run_is_cleaned_before_its_next_run(tmp_path, host, scheduler) -> None:
    """The run's dir (and its credential) stayed on the host while the same scheduler ran new
    runs there; it went only at the next `al start`."""
    project = ssh_project(tmp_path / "project", host, onInterrupted="fail")
    project.write("agents/worker/script.toml", LONG_SCRIPT)
    running = scheduler(project)
    project.al("run", "worker", "--no-follow", check=True)
    wait_until(lambda: "sleep 900" in host.ps(), 30, what="run begun")
    [lost_dir] = host.home.glob(".al-runs/*")
    host.server.stop()  # the host is lost mid-run: the run ends, its cleanup cannot reach it
    wait_until(lambda: "sandbox cleanup failed" in running.read_log(), 60, what="cleanup failed")
    host.server.start()  # ... and it comes back, the lost run's dir and credential still there
    assert (lost_dir / "credentials" / "fake_token" / "default" / "token").exists()
    project.write("agents/worker/script.toml", LIST_SCRIPT)
    result = project.al("run", "worker")
    assert result.returncode == 0, result.stdout + result.stderr
    [listing] = [e["data"]["output"] for e in events(project) if e["type"] == "tool_call"][-1:]
    assert lost_dir.name not in listing.split()  # gone before the new run's first command
    assert not lost_dir.exists()
    assert "stays until the host answers again" in running.read_log()

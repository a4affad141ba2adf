"""Docker on another host: the CI daemon reached through a real sshd on 127.0.0.1
(``host = "ssh://user@127.0.0.1:port"``), as a remote user in the docker group. The agent's
image is built there from its Dockerfile, the run's container gets the same hardening, its
credentials and commands are staged on that host and mounted read-only, the gateway is
forwarded into it, and nothing is left there after the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from llamaherd.api import SandboxSpec, StagedFile
from llamaherd.testing import OfflineProject, wait_until

pytestmark = pytest.mark.docker

DOCKERFILE = "FROM al-agent:latest\nUSER root\nRUN echo built-on-the-engine > /marker\nUSER node\n"


@pytest.fixture
def engine_user(sshd, ssh_user):
    """A remote account that may use the host's Docker engine."""
    return ssh_user(sshd, groups=("docker",))


def remote_table(user) -> dict:
    return {
        "type": "container",
        "host": f"ssh://{user.name}@127.0.0.1:{user.server.port}",
        "key_path": str(user.key),
        "ssh_options": {"UserKnownHostsFile": str(user.server.known_hosts)},
        "network": "none",
        "pids": 64,
        "tmpSize": "32m",
        "homeSize": "8m",
    }


def remote_private_dirs(user) -> list[Path]:
    return [p for p in Path("/tmp").glob("al-docker-*") if p.stat().st_uid == user.uid]


def test_a_container_runs_on_the_remote_engine(
    tmp_project, base_image, bin_dir, runtime, engine_user, gateway_stub
) -> None:
    tmp_project.config(f'[local]\nimage = "{base_image}"\nmemory = "256m"\ncpus = 1\n')
    tmp_project.add_agent("worker", tomli_w.dumps({"runtime": remote_table(engine_user)}))
    tmp_project.write("agents/worker/Dockerfile", DOCKERFILE)
    project = tmp_project.load()
    agent = project.agent("worker")
    tag = runtime.prepare(agent, project)  # built by the remote engine from the Dockerfile
    spec = SandboxSpec(
        run_id="worker-remote1",
        agent=agent,
        project=project,
        credential_files=[StagedFile("fake_token/default/token", b"remote-secret\n", 0o400)],
        env={"AL_RUN_TOKEN": "token-remote1"},
        bin_dir=bin_dir,
        timeout=60,
        credential_env=lambda root: {"CRED_ROOT": root},
        gateway_socket=gateway_stub.path,
        shared_files=[StagedFile("team/conventions.md", b"tabs\n", 0o444)],
    )
    sandbox = runtime.start(spec)
    try:
        handle = sandbox.handle()
        assert handle["engine"]["host"] == "127.0.0.1"
        private = handle["credentials_dir"]
        assert Path(private).stat().st_uid == engine_user.uid  # staged by the remote user
        out = sandbox.exec(
            "cat /marker; cat /credentials/fake_token/default/token; al-hello; "
            "cat /app/static/shared/team/conventions.md; "
            "touch /etc/x 2>&1 | tail -1; grep CapEff /proc/self/status; "
            'python3 -c "import socket; s=socket.socket(socket.AF_UNIX); '
            "s.connect('$AL_GATEWAY_URL'[7:]); s.sendall(b'ping'); print(s.recv(9))\""
        )
        lines = out.output.splitlines()
        assert lines[:4] == ["built-on-the-engine", "remote-secret", "hello from worker", "tabs"]
        assert "Read-only file system" in lines[4]
        assert lines[5].split() == ["CapEff:", "0000000000000000"]
        assert lines[6] == "b'pong'", out.output
        container = runtime.client(agent).api.inspect_container(handle["container"])
        assert container["Config"]["Image"] == tag
        assert container["HostConfig"]["ReadonlyRootfs"] is True
        assert container["HostConfig"]["CapDrop"] == ["ALL"]
        mounts = {m["Destination"]: m for m in container["Mounts"]}
        assert mounts["/credentials"]["Source"] == f"{private}/credentials"
        assert not mounts["/credentials"]["RW"]
    finally:
        sandbox.cleanup()
    assert not Path(private).exists()
    assert not remote_private_dirs(engine_user)


SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = "cat /marker && al-status from-the-container"}}]

[[turns]]
text = "done"
"""


def test_an_agent_runs_end_to_end_on_the_remote_engine(
    tmp_path, base_image, engine_user, docker_client
) -> None:
    project = OfflineProject(tmp_path / "project", f'[local]\nimage = "{base_image}"\n', fakes=True)
    config = {"models": ["scripted"], "runtime": remote_table(engine_user)}
    project.add_agent("worker", tomli_w.dumps(config))
    project.write("agents/worker/Dockerfile", DOCKERFILE)
    project.write("agents/worker/script.toml", SCRIPT)
    run = project.al("run", "worker", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    store = project.store()
    try:
        final = store.runs(agent="worker")[0]
        assert [m["text"] for m in store.status_messages(final.id)] == ["from-the-container"]
    finally:
        store.close()
    labels = {"label": [f"llamaherd.project={project.root}"]}
    wait_until(lambda: not docker_client.api.containers(all=True, filters=labels), 30)
    assert not remote_private_dirs(engine_user)


def test_an_unreachable_engine_host_is_one_line(tmp_project, runtime, engine_user) -> None:
    table = remote_table(engine_user) | {"host": "ssh://nobody@127.0.0.1:1"}
    tmp_project.add_agent("worker", tomli_w.dumps({"runtime": table}))
    project = tmp_project.load()
    [problem] = runtime.validate(project.agent("worker"), project)
    assert problem.startswith("warning: Docker engine ssh://nobody@127.0.0.1:1 not reachable: ")
    assert "Connection refused" in problem and "\n" not in problem


def test_checks_never_run_the_ssh_options_of_a_remote_engine(tmp_project, al, tmp_path) -> None:
    """`al validate` and `al doctor` connected to an agent's remote engine to see it answer,
    running its ProxyCommand on this machine; they now say why they did not connect."""
    marker = tmp_path / "ran"
    table = {
        "type": "container",
        "host": "ssh://agent@127.0.0.1:1",
        "ssh_options": {"ProxyCommand": f"sh -c 'touch {marker}'"},
    }
    tmp_project.add_agent("worker", tomli_w.dumps({"runtime": table}))
    checked = al("validate", cwd=tmp_project.root)
    assert "ssh_options.ProxyCommand runs a command on this machine" in checked.stdout
    assert "Docker engine ssh://agent@127.0.0.1:1: not connected" in checked.stdout
    doctor = al("doctor", cwd=tmp_project.root, timeout=120)
    [line] = [line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["docker"]]
    assert line.startswith("warning") and "not connected: ssh_options ProxyCommand" in line
    assert not marker.exists()

"""``al push`` against a real sshd on 127.0.0.1, as a throwaway user: a fresh project is
installed and started there, a signed webhook runs its agent there, a changed SKILL.md is
reloaded, broken configs are refused before anything changes, ``--dry-run`` changes nothing,
a release that does not start is rolled back. The "server" installs llamaherd from wheels of
this checkout (``--wheels``): no package index is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import requests

from llamaherd.api import CredentialStore
from llamaherd.plugins import registry
from llamaherd.testing import wait_until
from llamaherd.testing_ssh import free_port

pytestmark = pytest.mark.root

SECRET = "s3cret-webhook-key"
SCRIPT = """
[[turns]]
tool_calls = [{ name = "bash", arguments = { command = "whoami" } }]
[[turns]]
tool_calls = [{ name = "return_value", arguments = { value = "greeted" } }]
[[turns]]
text = "done"
"""


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def make_project(root: Path, user: str, port: int) -> None:
    runtime = f'runtime = {{ type = "host-user", run_as = "{user}" }}\n'
    write(
        root,
        {
            "config.toml": '[models.scripted]\nprovider = "scripted"\nmodel = "scripted"\n\n'
            f'[gateway]\nport = {port}\n\n[webhooks.hook]\ntype = "generic"\n',
            ".gitignore": "*.log\n",
            "debug.log": "not for the server\n",
            "agents/greeter/SKILL.md": "---\nname: greeter\ndescription: Greets.\n---\n"
            "Version one of the greeter.\n",
            "agents/greeter/config.toml": f'models = ["scripted"]\n{runtime}'
            '[[webhooks]]\nsource = "hook"\n',
            "agents/greeter/script.toml": SCRIPT,
            "agents/other/SKILL.md": "---\nname: other\ndescription: Idle.\n---\nOther one.\n",
            "agents/other/config.toml": f'models = ["scripted"]\n{runtime}',
        },
    )


def snapshot(base: Path) -> dict[str, str]:
    """Every file and link of a deployment but its state/ (the running scheduler writes there)."""
    found = {}
    if not base.exists():
        return found
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base)
        if rel.parts[0] == "state":
            continue
        if path.is_symlink():
            found[str(rel)] = "-> " + os.readlink(path)
        elif path.is_file():
            found[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def signed_post(port: int, payload: dict, secret: str | None = SECRET) -> requests.Response:
    body = json.dumps(payload).encode()
    headers = (
        registry()
        .webhook_sources["generic"]
        .request_headers(body, payload["event"], os.urandom(8).hex(), secret)
    )
    return requests.post(
        f"http://127.0.0.1:{port}/webhooks/hook", data=body, headers=headers, timeout=30
    )


def scheduler_pid(base: Path) -> int | None:
    try:
        return json.loads((base / "state" / "scheduler.json").read_text())["pid"]
    except (OSError, ValueError):
        return None


def owner(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def transcript(user: str, base: Path, run_id: str) -> str:
    """A run's transcript (its system prompt first) as JSON, from the deployment's own store,
    read as its user."""
    code = (
        "import json; from llamaherd.store import Store; "
        f"s = Store.open('sqlite:///.al/work-queue.db', '{base}/current/project'); "
        f"print(json.dumps(s.get_run('{run_id}').transcript))"
    )
    python = str(base / "current" / "venv" / "bin" / "python")
    result = subprocess.run(
        ["runuser", "-u", user, "--", python, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def deployment(tmp_path, sshd, remote_user, wheels, deploy_al):
    """A project, an environment `test` for the remote user, and ``push(*args)``."""
    for kind, name in (
        ("providers", "scripted"),
        ("runtimes", "host-user"),
        ("webhook_sources", "generic"),
    ):
        if name not in getattr(registry(), kind):
            pytest.skip(f"needs the plugin providing {name}")
    port = free_port()
    project = tmp_path / "proj"
    make_project(project, remote_user.name, port)
    CredentialStore(tmp_path / "creds").write("webhook_secret", "default", {"secret": SECRET})
    base = remote_user.home / "deploy"
    added = deploy_al(
        "env", "add", "test", "--host", "127.0.0.1", "--port", str(sshd.port),
        "--user", remote_user.name, "--key", str(remote_user.key), "--path", "~/deploy",
        "--ssh-option", f"UserKnownHostsFile={sshd.known_hosts}",
        "--ssh-option", "StrictHostKeyChecking=yes",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr

    def push(*args: str) -> subprocess.CompletedProcess[str]:
        return deploy_al(
            "push", *args, "--wheels", str(wheels), "--grace", "10", cwd=project, timeout=600
        )

    def al(*args: str) -> subprocess.CompletedProcess[str]:
        return deploy_al(*args, cwd=project)

    class Deployment:
        pass

    d = Deployment()
    d.project, d.base, d.port, d.user, d.push, d.al = project, base, port, remote_user, push, al
    yield d
    wrapper = base / "bin" / "al"
    if wrapper.exists():  # a graceful stop leaves no sockets or run dirs behind in /tmp
        subprocess.run(
            ["runuser", "-u", remote_user.name, "--", str(wrapper), "service", "stop",
             "--timeout", "30"],
            capture_output=True, timeout=60, cwd="/",
        )  # fmt: skip


def done_runs(d, agent: str) -> list[dict]:
    result = d.al("runs", agent, "--env", "test", "--json")
    assert result.returncode == 0, result.stderr
    return [r for r in json.loads(result.stdout) if r["state"] == "done"]


def test_push_installs_runs_reloads_and_refuses(deployment):
    d = deployment
    check = d.al("env", "check", "test")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "✓ Python 3." in check.stdout and "deployed: nothing yet" in check.stdout
    # --dry-run on a fresh server: the plan, and nothing changed there.
    before = snapshot(d.user.home)
    dry = d.push("test", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    for line in ("+ agents/greeter/SKILL.md", "+ config.toml", "+ webhook_secret/default/secret",
                 "scheduler: start", "dry run: nothing was changed on the server"):  # fmt: skip
        assert line in dry.stdout, line
    assert "debug.log" not in dry.stdout and SECRET not in dry.stdout + dry.stderr
    assert snapshot(d.user.home) == before

    # The first push installs, starts the scheduler as the remote user.
    first = d.push("test")
    assert first.returncode == 0, first.stdout + first.stderr
    assert SECRET not in first.stdout + first.stderr
    pid = scheduler_pid(d.base)
    assert pid and owner(pid) == d.user.uid
    secret = d.base / "credentials" / "webhook_secret" / "default" / "secret"
    assert secret.read_text() == SECRET + "\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(d.base.stat().st_mode) == 0o700
    project = d.base / "current" / "project"
    assert (project / "agents/greeter/SKILL.md").is_file() and not (project / "debug.log").exists()
    assert (project / ".al").is_symlink()

    # A signed webhook sent to the remote's port runs the agent there, as that user.
    assert signed_post(d.port, {"event": "ping"}, secret="wrong").status_code == 401
    response = signed_post(d.port, {"event": "ping"})
    assert response.status_code == 202, response.text
    assert response.json()["queued"] == ["greeter"]
    (run,) = wait_until(lambda: done_runs(d, "greeter"), 60, what="the webhook's run done")
    assert run["return_value"] == "greeted"
    logs = d.al("logs", "greeter", "--env", "test")
    assert d.user.name in logs.stdout  # `whoami` in the sandbox
    assert "Version one of the greeter." in transcript(d.user.name, d.base, run["id"])
    stat_rows = json.loads(d.al("stat", "--env", "test", "--json").stdout)["agents"]
    assert {r["agent"]: r["last_result"] for r in stat_rows} == {"greeter": "done", "other": None}

    # Nothing changed: nothing to do, no restart.
    same = d.push("test")
    assert "up to date" in same.stdout and scheduler_pid(d.base) == pid

    # A changed SKILL.md: a new release, the scheduler restarted and using it.
    skill = d.project / "agents/greeter/SKILL.md"
    skill.write_text(skill.read_text().replace("Version one", "Version two"))
    second = d.push("test")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "~ agents/greeter/SKILL.md" in second.stdout and "packages: unchanged" in second.stdout
    new_pid = scheduler_pid(d.base)
    assert new_pid and new_pid != pid and owner(new_pid) == d.user.uid
    assert signed_post(d.port, {"event": "ping"}).status_code == 202
    runs = wait_until(lambda: len(done_runs(d, "greeter")) == 2 and done_runs(d, "greeter"), 60)
    assert "Version two of the greeter." in transcript(d.user.name, d.base, runs[0]["id"])

    # A broken config is refused here, before anything is sent.
    deployed = snapshot(d.base)
    config = d.project / "agents/other/config.toml"
    good = config.read_text()
    config.write_text("shedule = 1\n" + good)
    broken = d.push("test")
    assert broken.returncode == 2
    assert "agents/other/config.toml: shedule: unknown key" in broken.stdout
    assert broken.stderr.strip().endswith("nothing was sent to the server")
    assert snapshot(d.base) == deployed and scheduler_pid(d.base) == new_pid

    # Valid here, not there: the release is validated on the server and refused there (the
    # credential it now needs is not on the server: --files-only does not bring it).
    CredentialStore(d.project.parent / "creds").write("webhook_secret", "extra", {"secret": "x"})
    config.write_text('credentials = ["webhook_secret:extra"]\n' + good)
    refused = d.push("test", "--files-only")
    assert refused.returncode == 2, refused.stdout
    assert "credential webhook_secret:extra not found" in refused.stdout
    assert "the release does not validate on the server" in refused.stderr
    assert snapshot(d.base) == deployed and scheduler_pid(d.base) == new_pid

    # A one-agent push touches only that agent (and brings only its credentials).
    skill.write_text(skill.read_text().replace("Version two", "Version three"))
    one = d.push("test", "other")
    assert one.returncode == 0, one.stdout + one.stderr
    assert (
        "~ agents/other/config.toml" in one.stdout and "+ webhook_secret/extra/secret" in one.stdout
    )
    assert "greeter" not in one.stdout
    assert "Version two" in (d.base / "current/project/agents/greeter/SKILL.md").read_text()
    assert (d.base / "credentials/webhook_secret/default/secret").exists()

    # New credentials alone: switched without a restart; the scheduler reads them per run.
    pid = scheduler_pid(d.base)
    CredentialStore(d.project.parent / "creds").write(
        "webhook_secret", "default", {"secret": "new"}
    )
    rotated = d.push("test", "--creds-only")
    assert rotated.returncode == 0, rotated.stdout + rotated.stderr
    assert "~ webhook_secret/default/secret" in rotated.stdout and "files:" not in rotated.stdout
    assert "keep running (it reads credentials per run)" in rotated.stdout
    assert scheduler_pid(d.base) == pid
    assert signed_post(d.port, {"event": "ping"}).status_code == 401  # the old secret
    assert signed_post(d.port, {"event": "ping"}, secret="new").status_code == 202


def test_a_release_that_does_not_start_is_rolled_back(deployment):
    d = deployment
    assert d.push("test").returncode == 0
    pid, release = scheduler_pid(d.base), os.readlink(d.base / "current")
    with socket.socket() as taken:  # the new release's port is in use: it cannot come up
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = d.project / "config.toml"
        config.write_text(
            config.read_text().replace(f"port = {d.port}", f"port = {taken.getsockname()[1]}")
        )
        failed = d.push("test")
    assert failed.returncode == 1  # it did not come up: an operation failure
    assert "rolling back" in failed.stdout
    assert "Address already in use" in failed.stderr and "which runs again" in failed.stderr
    assert os.readlink(d.base / "current") == release
    assert sorted(os.listdir(d.base / "releases")) == [release.split("/")[-1]]
    new_pid = wait_until(lambda: scheduler_pid(d.base), 30)
    assert new_pid != pid and owner(new_pid) == d.user.uid
    assert signed_post(d.port, {"event": "ping"}).status_code == 202  # the old release serves


def test_a_provisioned_server_takes_a_push(tmp_path, sshd, remote_user, wheels, deploy_al):
    """`al env prov` (the cloud's API a stand-in, the server this machine's sshd), then
    `al env set` and `al push` as a peer user runs them: the environment's layers and the
    project's shared/ travel, the scheduler listens on every interface at the port the
    firewall opens, and the bound project's `al stat` reads it there."""
    import fake_cloud

    cloud = fake_cloud.start("hetzner")
    gateway = free_port()
    project = tmp_path / "proj"
    make_project(project, remote_user.name, free_port())
    write(project, {"shared/conventions.md": "Be brief.\n"})
    store = CredentialStore(tmp_path / "creds")
    store.write("webhook_secret", "default", {"secret": SECRET})
    store.write("hetzner_api_key", "default", {"api_key": fake_cloud.TOKEN})
    public = remote_user.key.with_suffix(".pub").read_text()
    store.write(
        "vps_ssh", "default", {"private_key": remote_user.key.read_text(), "public_key": public}
    )
    extra = {"AL_HETZNER_API_URL": cloud.url, "AL_PROVISION_POLL": "0.05"}
    base = remote_user.home / "deploy"
    try:
        made = deploy_al(
            "env", "prov", "prod", "--provider", "hetzner", "--ssh-port", str(sshd.port),
            "--gateway-port", str(gateway), "--user", remote_user.name, "--path", "~/deploy",
            "--ssh-option", f"UserKnownHostsFile={sshd.known_hosts}", cwd=project, extra=extra,
        )  # fmt: skip
        assert made.returncode == 0, made.stdout + made.stderr
        assert deploy_al("env", "set", "prod", cwd=project).returncode == 0
        pushed = deploy_al(
            "push", "--wheels", str(wheels), "--grace", "10", cwd=project, timeout=600
        )
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert "+ shared/conventions.md" in pushed.stdout and "+ .env.toml" in pushed.stdout
        deployed = base / "current" / "project"
        assert (deployed / "shared" / "conventions.md").read_text() == "Be brief.\n"
        server_env = tomllib.loads((deployed / ".env.toml").read_text())
        assert server_env == {
            "gateway": {"url": f"http://127.0.0.1:{gateway}", "port": gateway, "bind": "0.0.0.0"}
        }
        assert json.loads((base / "state" / "scheduler.json").read_text())["url"].endswith(
            f":{gateway}"
        )
        assert signed_post(gateway, {"event": "ping"}).status_code == 202
        stat = deploy_al("stat", "--json", cwd=project)  # bound: the deployed scheduler
        assert stat.returncode == 0, stat.stderr
        assert {r["agent"] for r in json.loads(stat.stdout)["agents"]} == {"greeter", "other"}

        store.write("webhook_secret", "default", {"secret": "rotated"})
        skipping = deploy_al("push", "-E", "prod", "--skip-creds", "--dry-run", cwd=project)
        assert skipping.returncode == 0, skipping.stdout + skipping.stderr
        assert "credentials:" not in skipping.stdout and "files: unchanged" in skipping.stdout

        gone = deploy_al("env", "deprov", "prod", cwd=project, extra=extra)
        assert gone.returncode == 0, gone.stdout + gone.stderr
        assert "unbound this project from prod" in gone.stdout
        assert "environment" not in (project / ".env.toml").read_text()
        assert not cloud.servers and not cloud.firewalls and not cloud.keys
    finally:
        cloud.shutdown()
        cloud.server_close()
        wrapper = base / "bin" / "al"
        if wrapper.exists():
            subprocess.run(
                ["runuser", "-u", remote_user.name, "--", str(wrapper), "service", "stop",
                 "--timeout", "30"],
                capture_output=True, timeout=60, cwd="/",
            )  # fmt: skip

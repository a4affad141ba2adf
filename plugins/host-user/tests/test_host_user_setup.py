"""`al setup host-user`, prepare's errors, and running without root (run_as = yourself)."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sysconfig
import tempfile
import textwrap
from pathlib import Path

import click
import pytest
import tomli_w
from click.testing import CliRunner
from llamaherd_host_user.setup import setup_host_user

from llamaherd.api import SandboxError
from llamaherd.plugins import get_manager

pytestmark = pytest.mark.root

SETUP_USER = "al-test-setup"
SITE = sysconfig.get_paths()["purelib"]


def run_as_user(user: str, code: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as ``user`` (not root) with the dev venv's packages."""
    # The venv's interpreter lives under /root; the system one is the same version.
    prologue = f"import site; site.addsitedir({SITE!r})\n"
    entry = pwd.getpwnam(user)
    return subprocess.run(
        ["/usr/bin/python3", "-c", prologue + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=workdir,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[],
        env={"PATH": "/usr/bin:/bin", "HOME": str(workdir), "AL_NO_ENTRYPOINTS": "1"},
        timeout=60,
    )


@pytest.fixture
def user_dir(agent_user):
    """A scratch dir the agent user owns (pytest's tmp_path is root-only)."""
    directory = Path(tempfile.mkdtemp(prefix="al-test-nonroot-"))
    shutil.chown(directory, agent_user, agent_user)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_setup_creates_the_user_once(agent_users):
    if pwd.getpwall() and SETUP_USER in {p.pw_name for p in pwd.getpwall()}:
        subprocess.run(["userdel", SETUP_USER], check=True, capture_output=True)
    first = CliRunner().invoke(setup_host_user, ["--user", SETUP_USER])
    assert first.exit_code == 0, first.output
    assert f"created system user {SETUP_USER!r}" in first.output
    entry = pwd.getpwnam(SETUP_USER)
    assert entry.pw_shell == "/bin/sh"
    again = CliRunner().invoke(setup_host_user, ["--user", SETUP_USER])
    assert again.exit_code == 0 and "already exists" in again.output


def test_setup_is_added_to_the_core_setup_group():
    @click.group()
    def cli():
        pass

    @cli.group()
    def setup():
        pass

    get_manager().hook.register_commands(cli=cli)
    assert "host-user" in setup.commands


def test_setup_without_root_prints_the_commands(user_dir, agent_user):
    result = run_as_user(
        agent_user,
        """
        from llamaherd_host_user.setup import setup_host_user
        setup_host_user(["--user", "al-agent"])
        """,
        user_dir,
    )
    assert result.returncode == 1
    assert "sudo useradd --system" in result.stdout and "al-agent" in result.stdout


def test_prepare_names_the_fix_for_a_missing_user(runtime, make_agent, agent_user):
    with pytest.raises(SandboxError) as error:
        runtime.prepare(make_agent(run_as="al-no-such-user"), None)
    message = str(error.value)
    assert "agents/worker/config.toml: runtime.run_as" in message
    assert "al setup host-user --user al-no-such-user" in message
    assert "useradd --system" in message
    with pytest.raises(SandboxError, match="runtime.groups"):
        runtime.prepare(make_agent(run_as=agent_user, groups=["al-no-such-group"]), None)


def test_groups_are_added(start, agent_user, other_user):
    sandbox = start(groups=[other_user])
    groups = sandbox.exec("id -Gn").output.split()
    assert other_user in groups and agent_user in groups


def test_validate_warns_about_groups_as_good_as_root(tmp_project, al, agent_user, other_user):
    """A sandbox given `groups = ["docker", "0", "disk", "shadow"]` read /etc/shadow and was
    answered by /var/run/docker.sock: `al validate` says so, by name and by gid."""
    import grp

    shadow_gid = str(grp.getgrnam("shadow").gr_gid)
    groups = ["docker", "0", "disk", shadow_gid, other_user]
    tmp_project.config('[models.m]\nprovider = "scripted"\nmodel = "m"\n')
    runtime = {"type": "host-user", "run_as": agent_user, "groups": groups}
    tmp_project.add_agent("worker", tomli_w.dumps({"models": ["m"], "runtime": runtime}))
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 0, result.stdout
    warned = [line for line in result.stdout.splitlines() if "runtime: groups:" in line]
    assert [line.split("groups: ")[1].split(":")[0] for line in warned] == [
        "docker",
        "0 (root)",
        "disk",
        f"{shadow_gid} (shadow)",
    ]
    assert "reads the password hashes" in warned[3] and "can take this host" in warned[3]


def test_without_root_as_yourself(user_dir, agent_users, agent_user, other_user):
    agent = agent_users[0]
    project = user_dir / "project"
    for name, user in (("worker", agent_user), ("other", other_user)):
        (project / "agents" / name).mkdir(parents=True)
        (project / "agents" / name / "SKILL.md").write_text(f"---\nname: {name}\n---\nWork.\n")
        (project / "agents" / name / "config.toml").write_text(
            f'[runtime]\ntype = "host-user"\nrun_as = "{user}"\n'
        )
    (project / "bin").mkdir()
    subprocess.run(["chown", "-R", agent_user, str(project)], check=True)
    result = run_as_user(
        agent_user,
        f"""
        import json, os
        from pathlib import Path
        from llamaherd.project import load_project
        from llamaherd.types import SandboxError, SandboxSpec, StagedFile
        from llamaherd_host_user.runtime import HostUserRuntime

        project = load_project(Path({str(project)!r}))
        runtime = HostUserRuntime()
        out = {{}}
        try:
            runtime.prepare(project.agent("other"), project)
        except SandboxError as exc:
            out["error"] = str(exc)
        agent = project.agent("worker")
        runtime.prepare(agent, project)
        spec = SandboxSpec(run_id="nonroot-1", agent=agent, project=project,
                           credential_files=[StagedFile("github_token/default/token", b"t\\n", 0o400)],
                           env={{}}, bin_dir=project.root / "bin", timeout=30)
        sandbox = runtime.start(spec)
        out["warnings"] = runtime.warnings(agent, project)
        out["kind"] = sandbox.containment.kind
        out["workdir"] = sandbox.workdir
        out["id"] = sandbox.exec("id -u").output.strip()
        sandbox.exec("setsid sh -c 'sleep 300 & echo $! > d.pid' </dev/null >/dev/null 2>&1 &"
                     " while [ ! -s d.pid ]; do sleep 0.01; done")
        pid = int(sandbox.get_file("d.pid"))
        sandbox.kill()
        stat = Path(f"/proc/{{pid}}/stat")
        out["daemon_gone"] = not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        sandbox.cleanup()
        out["cleaned"] = not Path(sandbox.workdir).exists()
        print(json.dumps(out))
        """,
        user_dir,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "not root, so it cannot switch user" in out["error"]
    assert f'set run_as = "{agent_user}"' in out["error"]
    assert out["id"] == str(agent.pw_uid)
    assert out["workdir"] == f"/tmp/al-runs-{agent.pw_uid}/nonroot-1"
    assert out["kind"] == "proc"  # no cgroup delegation for this user
    assert out["daemon_gone"] and out["cleaned"]
    assert "without isolation" in out["warnings"][0]

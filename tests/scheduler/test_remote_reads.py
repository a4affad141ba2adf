"""``--env NAME`` on the read commands: core asks the ``open_control_channel`` hook for a channel
and reads through the scheduler's control API, never the local store; without a plugin it names
the distribution to install.

The plugin here is a fake distribution whose channel is the scheduler's own unix socket: the
same wire path as the deploy plugin's SSH-forwarded socket, without SSH.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from llamaherd.install import install_command, needs
from llamaherd.testing import fake_distribution, wait_until

RELAY = """
import json
from pathlib import Path

from llamaherd import hookimpl
from llamaherd.api import CommandFailed, ControlChannel

PROJECT = Path({project!r})
CLOSED = Path({closed!r})


@hookimpl
def open_control_channel(environment):
    if environment == "broken":
        raise RuntimeError("boom")
    if environment == "down":
        raise CommandFailed("down: no scheduler is running there")
    if environment != "prod":
        return None
    info = json.loads((PROJECT / ".al" / "scheduler.json").read_text())
    token = (PROJECT / ".al" / "control-token").read_text().strip()
    return ControlChannel(
        socket=info["socket"], token=token, where="relay:prod", close=lambda: CLOSED.touch()
    )
"""


def al(
    *args: str, cwd: Path, site: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    import os

    environ = {**os.environ, **env}
    if site is not None:
        environ["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, "-m", "llamaherd", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_read_commands_go_through_the_plugins_channel(project, scheduler, tmp_path):
    project.add_scripted_agent(
        "greeter",
        script='[[turns]]\ntool_calls = [{ name = "return_value", arguments = { value = "hi" } }]\n'
        '[[turns]]\ntext = "done"\n',
    )
    sched = scheduler(project)
    assert sched.post("/control/run", {"agent": "greeter"}).status_code == 202
    run = project.wait_run(lambda runs: next((r for r in runs if r.state == "done"), None))

    site, closed = tmp_path / "site", tmp_path / "closed"
    code = RELAY.format(project=str(project.root), closed=str(closed))
    fake_distribution(site, "llamaherd-relay", "relay", "llamaherd_relay", code)
    elsewhere = tmp_path / "elsewhere"  # not a project: --env needs none
    elsewhere.mkdir()

    stat = al("stat", "--env", "prod", "--json", cwd=elsewhere, site=site)
    assert stat.returncode == 0, stat.stderr
    (row,) = json.loads(stat.stdout)["agents"]
    assert (row["agent"], row["last_run"], row["last_result"]) == ("greeter", run.id, "done")
    assert closed.exists()  # the channel was closed when the command ended

    runs = json.loads(al("runs", "--env", "prod", "--json", cwd=elsewhere, site=site).stdout)
    assert [r["id"] for r in runs] == [run.id]
    table = al("runs", "greeter", "--env", "prod", cwd=elsewhere, site=site)
    assert run.id in table.stdout and "done" in table.stdout

    for target in ("greeter", run.id, run.id[:12]):
        logs = al("logs", target, "--env", "prod", "--json", cwd=elsewhere, site=site)
        assert logs.returncode == 0, logs.stderr
        events = [json.loads(line) for line in logs.stdout.splitlines()]
        assert any(e["type"] == "return" for e in events)
    followed = al("logs", "greeter", "-f", "--env", "prod", cwd=elsewhere, site=site)
    assert f"run {run.id} done" in followed.stdout

    stats = json.loads(al("stats", "--env", "prod", "--json", cwd=elsewhere, site=site).stdout)
    assert stats["runs"] == 1 and stats["states"] == {"done": 1}
    # $AL_ENV is the same as --env
    assert json.loads(al("stat", "--json", cwd=elsewhere, site=site, AL_ENV="prod").stdout)


def test_env_errors_are_one_line(project, scheduler, tmp_path):
    project.add_scripted_agent("greeter")
    scheduler(project)
    site = tmp_path / "site"
    code = RELAY.format(project=str(project.root), closed=str(tmp_path / "closed"))
    fake_distribution(site, "llamaherd-relay", "relay", "llamaherd_relay", code)
    cases = {  # an unknown name is a usage error (2); a failure to reach it, an operation's (1)
        "staging": (2, "error: --env staging: no environment 'staging' in "),
        "down": (1, "error: down: no scheduler is running there"),
        "broken": (
            1,
            "error: --env broken: a plugin failed to open the channel: RuntimeError: boom",
        ),
    }
    for name, expected in cases.items():
        result = al("stat", "--env", name, cwd=tmp_path, site=site)
        code, message = expected
        assert result.returncode == code and result.stderr.strip().startswith(message)
    unknown = al("logs", "nobody", "--env", "prod", cwd=tmp_path, site=site)
    assert unknown.stderr.strip() == "error: no such run or agent 'nobody' (see `al runs`)"
    runs = al("runs", "nobody", "--env", "prod", cwd=tmp_path, site=site)
    assert runs.stderr.strip() == "error: relay:prod: no such agent 'nobody' (agents: greeter)"


def test_without_a_plugin_env_names_the_distribution(project, tmp_path):
    # An empty allowlist loads no entry-point plugin: core alone.
    result = al("stat", "--env", "prod", cwd=tmp_path, AL_LOAD_PLUGINS="")
    assert result.returncode == 2
    assert result.stderr.strip() == textwrap.dedent(
        "error: --env prod: reaching a deployed scheduler needs a plugin such as "
        f"llamaherd-deploy ({install_command('llamaherd-deploy')})"
    )
    push = al("push", "prod", cwd=tmp_path, AL_LOAD_PLUGINS="")
    assert f"`al push` {needs('llamaherd-deploy')}" in push.stderr


def test_a_local_read_is_unchanged_by_the_option(project):
    project.add_scripted_agent("greeter")
    assert project.al("run", "greeter").returncode == 0
    rows = json.loads(project.al("stat", "--json", check=True).stdout)["agents"]
    assert rows[0]["last_result"] == "done"
    wait_until(lambda: json.loads(project.al("runs", "--json", check=True).stdout))


def test_control_commands_reach_a_deployed_environment(project, scheduler, tmp_path):
    """An environment whose file has a [server] is deployed: `-E NAME` (and a project bound
    to it in .env.toml) makes run, pause, resume, kill and stop act on the scheduler there,
    through the plugin's channel, never on anything here."""
    project.add_scripted_agent(
        "greeter",
        script='[[turns]]\ntool_calls = [{ name = "return_value", arguments = { value = "hi" } }]\n'
        '[[turns]]\ntext = "done"\n',
    )
    sched = scheduler(project)
    site = tmp_path / "site"
    code = RELAY.format(project=str(project.root), closed=str(tmp_path / "closed"))
    fake_distribution(site, "llamaherd-relay", "relay", "llamaherd_relay", code)
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "prod.toml").write_text('[server]\nhost = "prod.example"\n')
    here = tmp_path / "here"  # another checkout of the project, bound to prod
    (here / "agents" / "greeter").mkdir(parents=True)
    (here / "agents" / "greeter" / "SKILL.md").write_text("---\nname: greeter\n---\nhi\n")
    (here / ".env.toml").write_text('environment = "prod"\n')

    def remote(*args: str):
        # Only the relay reaches "prod" (the deploy plugin would ssh to prod.example).
        return al(
            *args, cwd=here, site=site, AL_ENVIRONMENTS_DIR=str(envs), AL_DISABLE_PLUGINS="deploy"
        )

    ran = remote("run", "greeter")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert 'return value: "hi"' in ran.stdout
    assert not (here / ".al").exists()  # nothing ran here
    assert remote("pause", "greeter", "-E", "prod").stdout.strip() == "paused greeter"
    state = json.loads(remote("stat", "--json").stdout)["agents"][0]["state"]
    assert state == "paused"
    assert remote("resume", "greeter").stdout.strip() == "resumed greeter"
    assert remote("kill", "greeter").stdout.strip() == "killed 0 run(s): -"
    scheduler_log = remote("logs")
    assert scheduler_log.returncode == 2
    assert "the deployed scheduler's own log is on its server: `al env logs prod`" in (
        scheduler_log.stderr
    )
    stopped = remote("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("stop requested: the scheduler at relay:prod stops")
    wait_until(lambda: sched.proc.poll() is not None, 30, what="the scheduler stopped")

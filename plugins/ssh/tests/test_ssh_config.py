"""``al validate`` and ``al doctor`` for ssh agents: bad settings are one line naming the file
and key before anything connects; the doctor connects and checks what a run needs there."""

from __future__ import annotations

import subprocess

import pytest
import tomli_w


def write_agent(tmp_project, runtime: dict) -> None:
    tmp_project.config('[models.m]\nprovider = "scripted"\nmodel = "m"\n')
    tmp_project.add_agent("worker", tomli_w.dumps({"models": ["m"], "runtime": runtime}))


@pytest.mark.parametrize(
    ("runtime", "line"),
    [
        (
            {"type": "ssh", "host": "-oProxyCommand=touch /tmp/pwned"},
            "agents/worker/config.toml: runtime.host: '-oProxyCommand=touch /tmp/pwned' is not "
            "a host name, address or ~/.ssh/config alias (letters, digits, '.', '-', '_'; not "
            "starting with '-')",
        ),
        (
            {"type": "ssh", "host": "h", "ssh_options": {"ControlPath": "/tmp/x"}},
            "agents/worker/config.toml: runtime.ssh_options.ControlPath: set by llamaherd "
            "itself (connections are multiplexed and never prompt); remove it",
        ),
        (
            {"type": "ssh", "host": "a", "hosts": [{"host": "b"}]},
            'agents/worker/config.toml: runtime.hosts: give either "host" (one host) or "hosts" '
            "(a pool)",
        ),
        (
            {"type": "ssh", "hosts": [{"host": "b"}, {"host": "b"}]},
            "agents/worker/config.toml: runtime.hosts[1]: b is listed twice",
        ),
        (
            {"type": "ssh", "hosts": [{"host": "b", "user": "x y"}]},
            "agents/worker/config.toml: runtime.hosts[0].user: 'x y' is not a login name "
            "(letters, digits, '.', '-', '_'; not starting with '-')",
        ),
        (
            {"type": "ssh"},
            'agents/worker/config.toml: runtime.host: missing: the host to run on (or "hosts")',
        ),
        (
            {"type": "ssh", "hosts": [{"host": "b", "capacity": 0}]},
            "agents/worker/config.toml: runtime.hosts[0].capacity: expected a number >= 1, got 0",
        ),
    ],
)
def test_bad_settings_are_one_line(tmp_project, al, runtime, line) -> None:
    write_agent(tmp_project, runtime)
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [line]


def test_switching_host_key_checks_off_is_a_warning(tmp_project, al) -> None:
    write_agent(
        tmp_project, {"type": "ssh", "host": "h", "ssh_options": {"StrictHostKeyChecking": "no"}}
    )
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 0, result.stdout
    assert "StrictHostKeyChecking=no switches host key checking off" in result.stdout


def test_doctor_checks_each_host(tmp_project, al, sshd, ssh_user) -> None:
    good, shut = ssh_user(sshd), ssh_user(sshd)
    subprocess.run(["usermod", "--shell", "/usr/sbin/nologin", shut.name], check=True)
    pool = [{k: v for k, v in u.runtime().items() if k != "type"} for u in (good, shut)]
    write_agent(tmp_project, {"type": "ssh", "hosts": pool})
    tmp_project.add_agent(
        "elsewhere",
        tomli_w.dumps({"models": ["m"], "runtime": good.runtime(cwd="/nonexistent")}),
    )
    result = al("doctor", cwd=tmp_project.root, timeout=120)
    lines = [line for line in result.stdout.splitlines() if line.split()[1:2] == ["ssh"]]
    label = f"127.0.0.1:{sshd.port}"
    found = {line.split(" (")[0].split()[-1] + " " + line.split("(")[1].split(")")[0]: line
             for line in lines}  # fmt: skip
    ok = found[f"{good.name}@{label} agents/worker"]
    assert ok.startswith("ok") and "login shell /bin/sh, runs under" in ok, result.stdout
    missing = found[f"{good.name}@{label} agents/elsewhere"]
    assert missing.startswith("error")
    assert "cwd '/nonexistent' does not exist on the host" in missing
    nologin = found[f"{shut.name}@{label} agents/worker"]
    assert nologin.startswith("error") and "This account is currently not available" in nologin
    assert result.returncode == 1


def test_command_running_ssh_options_are_warned_about_and_never_run_by_checks(
    tmp_project, al, tmp_path
) -> None:
    """`al doctor` ran an agent's ProxyCommand on the scheduler's machine (as root); a check
    of the configuration now connects to nothing whose options run a command here."""
    marker = tmp_path / "ran"
    options = {
        "ProxyCommand": f"sh -c 'touch {marker}'",
        "PermitLocalCommand": "yes",
        "LocalCommand": f"touch {marker}",
        "KnownHostsCommand": f"/bin/sh -c 'touch {marker}'",
    }
    write_agent(
        tmp_project, {"type": "ssh", "host": "127.0.0.1", "port": 1, "ssh_options": options}
    )
    checked = al("validate", cwd=tmp_project.root)
    assert checked.returncode == 0, checked.stdout
    for name in ("ProxyCommand", "PermitLocalCommand", "LocalCommand", "KnownHostsCommand"):
        assert f"ssh_options.{name} runs a command on this machine" in checked.stdout
    doctor = al("doctor", cwd=tmp_project.root, timeout=120)
    [line] = [line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["ssh"]]
    assert line.startswith("warning") and "not connected: ssh_options ProxyCommand" in line
    assert not marker.exists()


def test_ssh_config_blocks_are_refused_as_options(tmp_project, al) -> None:
    write_agent(
        tmp_project,
        {"type": "ssh", "host": "h", "ssh_options": {"Match": 'exec "touch /tmp/x"'}},
    )
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        "agents/worker/config.toml: runtime.ssh_options.Match: a block of an ssh_config file, "
        "not an option (ssh refuses it with -o); put it in ~/.ssh/config"
    ]

"""``al env``: environment files where and as the peer keeps them, 0600 in a 0700 directory."""

from __future__ import annotations

import json
import stat
import tomllib

import pytest


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_add_ls_show_rm(deploy_al, tmp_path):
    added = deploy_al(
        "env", "add", "prod", "--host", "203.0.113.7", "--user", "deploy", "--port", "2200",
        "--path", "/srv/agents", "--ssh-option", "ProxyJump=bastion",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    path = tmp_path / "envs" / "prod.toml"
    assert (mode(path.parent), mode(path)) == (0o700, 0o600)
    assert tomllib.loads(path.read_text()) == {
        "server": {
            "host": "203.0.113.7",
            "user": "deploy",
            "port": 2200,
            "basePath": "/srv/agents",
            "sshOptions": ["ProxyJump=bastion"],
        }
    }
    assert deploy_al("env", "add", "staging", "--host", "staging.example").returncode == 0
    listing = [line.split() for line in deploy_al("env", "ls").stdout.splitlines()]
    assert listing == [
        ["NAME", "SERVER", "PORT"],
        ["prod", "deploy@203.0.113.7:/srv/agents", "2200"],
        ["staging", "root@staging.example:/opt/action-llama", "22"],
    ]
    listed = json.loads(deploy_al("env", "ls", "--json").stdout)
    assert [(e["name"], e["host"], e["port"], e["path"]) for e in listed] == [
        ("prod", "203.0.113.7", 2200, "/srv/agents"),
        ("staging", "staging.example", 22, "/opt/action-llama"),
    ]
    shown = deploy_al("env", "show", "staging").stdout
    assert "path        /opt/action-llama (default)" in shown
    again = deploy_al("env", "add", "prod", "--host", "elsewhere")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert deploy_al("env", "add", "prod", "--host", "elsewhere", "--force").returncode == 0
    assert deploy_al("env", "rm", "prod").returncode == 0
    assert not path.exists()
    gone = deploy_al("env", "show", "prod")
    assert gone.stderr.strip() == (
        f"error: no environment 'prod' in {tmp_path}/envs (known: staging); create it with "
        "`al env init prod` or `al env add prod --host HOST`"
    )


def test_a_non_root_user_deploys_under_its_home_by_default(deploy_al):
    deploy_al("env", "add", "box", "--host", "box", "--user", "me")
    assert deploy_al("env", "ls").stdout.splitlines()[1].split() == [
        "box",
        "me@box:~/action-llama",
        "22",
    ]


def test_an_environment_the_peer_wrote_is_read_as_it_is(deploy_al, tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "peer.toml").write_text(
        '[server]\nhost = "198.51.100.4"\nuser = "root"\nport = 22\n'
        'basePath = "/opt/action-llama"\nkeyPath = "~/.ssh/id_ed25519"\n'
        'provider = "vps"\nvultrInstanceId = "abc"\n\n[gateway]\nurl = "http://198.51.100.4:8080"\n'
    )
    assert deploy_al("env", "ls").stdout.splitlines()[1].split() == [
        "peer",
        "root@198.51.100.4:/opt/action-llama",
        "22",
    ]
    assert "key         ~/.ssh/id_ed25519" in deploy_al("env", "show", "peer").stdout


def test_bad_input_is_one_clear_line(deploy_al, tmp_path):
    cases = {
        ("env", "add", "Prod", "--host", "h"): "error: invalid environment name 'Prod': expected "
        "lowercase letters, digits and '-' (not first or last), at most 50 characters",
        ("env", "add", "p", "--host", "h", "--path", "srv"): "error: --path srv: expected an "
        "absolute path or ~/... on the server",
        ("env", "add", "p", "--host", "h", "--ssh-option", "Port"): "error: --ssh-option Port: "
        "expected KEY=VALUE",
        ("env", "rm", "nope"): "error: no environment 'nope' (`al env list` lists them)",
    }
    for args, message in cases.items():
        result = deploy_al(*args)
        assert (result.returncode, result.stderr.strip()) == (2, message)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "odd.toml").write_text('[server]\nhost = "h"\nport = "22"\n')
    odd = deploy_al("env", "show", "odd")
    assert (
        odd.stderr.strip()
        == f"error: {tmp_path}/envs/odd.toml: server.port: expected an integer 1-65535, got '22'"
    )
    (tmp_path / "envs" / "stub.toml").write_text('[server]\nhost = "REPLACE_ME"\n')
    stub = deploy_al("env", "show", "stub")
    assert "server.host: expected a host name, got 'REPLACE_ME'" in stub.stderr


def test_check_of_an_unreachable_host_says_why(deploy_al, tmp_path):
    from llamaherd.testing_ssh import free_port

    port = free_port()  # nothing listens there
    deploy_al("env", "add", "down", "--host", "127.0.0.1", "--port", str(port), "--user", "x")
    result = deploy_al("env", "check", "down")
    assert result.returncode == 1  # unreachable: an operation failure
    assert result.stderr.startswith(
        f"error: ssh x@127.0.0.1: ssh: connect to host 127.0.0.1 port {port}"
    )
    assert "Connection refused" in result.stderr


def test_init_list_show_set_as_the_peer_names_them(deploy_al, tmp_path):
    project = tmp_path / "proj"
    (project / "agents").mkdir(parents=True)
    (project / ".env.toml").write_text('# mine\nprojectName = "p"\n\n[gateway]\nport = 9000\n')
    assert deploy_al("env", "init", "prod", "--type", "server").returncode == 0
    assert tomllib.loads((tmp_path / "envs" / "prod.toml").read_text()) == {
        "server": {
            "host": "REPLACE_ME",
            "user": "root",
            "port": 22,
            "basePath": "/opt/action-llama",
        }
    }
    (tmp_path / "envs" / "staging.toml").write_text('[models.scripted]\nscript = "s.toml"\n')
    listing = deploy_al("env", "list").stdout.splitlines()
    assert (
        listing[1].startswith("prod") and "(invalid: " in listing[1] and "REPLACE_ME" in listing[1]
    )
    assert listing[2].split() == ["staging", "(settings", "only,", "no", "server)", "-"]
    assert deploy_al("env", "ls").stdout.splitlines() == listing  # our earlier name
    listed = json.loads(deploy_al("env", "list", "--json").stdout)
    assert [(e["name"], e["type"]) for e in listed] == [("prod", "invalid"), ("staging", "config")]
    shown = deploy_al("env", "show", "staging").stdout
    assert '  [models.scripted]\n  script = "s.toml"' in shown
    skeleton = deploy_al("env", "show", "prod")  # shown as it is, and what to fix said
    assert '  [server]\n  host = "REPLACE_ME"' in skeleton.stdout
    assert skeleton.returncode == 2
    assert "server.host: expected a host name, got 'REPLACE_ME'" in skeleton.stderr
    again = deploy_al("env", "init", "prod")
    assert again.returncode == 2 and "already exists" in again.stderr

    bound = deploy_al("env", "set", "staging", cwd=project)
    assert bound.returncode == 0, bound.stderr
    text = (project / ".env.toml").read_text()
    assert text == 'environment = "staging"\n# mine\nprojectName = "p"\n\n[gateway]\nport = 9000\n'
    assert deploy_al("env", "set", "elsewhere", cwd=project).stderr.startswith(
        "warning: no environment 'elsewhere' yet"
    )
    assert deploy_al("env", "set", cwd=project).returncode == 0
    assert (project / ".env.toml").read_text() == text.replace('environment = "staging"\n', "")
    nowhere = deploy_al("env", "set", "staging", cwd=tmp_path / "envs")
    assert nowhere.returncode == 2 and "not inside a project" in nowhere.stderr


def test_hosts_and_users_that_ssh_would_read_as_options_are_refused(deploy_al, tmp_path):
    marker = tmp_path / "pwned"
    evil = f"-oProxyCommand=touch {marker}"
    for args, message in {
        ("--host", evil): f"error: --host {evil!r}: expected a host name",
        ("--host", "h", "--user", "-oProxyCommand=x"): "error: --user '-oProxyCommand=x': "
        "expected a login name",
    }.items():
        result = deploy_al("env", "add", "x", *args)
        assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "envs" / "x.toml").exists()
    # A file written by hand (or by someone else) is refused as well, before any ssh runs.
    (tmp_path / "envs").mkdir(exist_ok=True)
    (tmp_path / "envs" / "x.toml").write_text(f'[server]\nhost = "{evil}"\n')
    (tmp_path / "proj" / "agents").mkdir(parents=True)
    for command in (("env", "check", "x"), ("push", "x"), ("stat", "-E", "x")):
        result = deploy_al(*command, cwd=tmp_path / "proj")
        assert result.returncode == 2 and "server.host: expected a host name" in result.stderr
    assert not marker.exists()


def test_ssh_never_reads_the_destination_as_an_option(tmp_path):
    """Past the checks too: every ssh command line ends its options with ``--``."""
    from llamaherd_deploy.environments import Environment
    from llamaherd_deploy.ssh import Connection

    from llamaherd.api import LlamaherdError

    marker = tmp_path / "pwned"
    env = Environment("x", host=f"-oProxyCommand=touch {marker}", user="nobody", port=22)
    with pytest.raises(LlamaherdError):
        Connection(env).open()
    conn = Connection(env)
    try:  # without "--", the remote command would be taken as the destination
        assert conn.run("localhost", timeout=30).returncode != 0
    finally:
        conn.close()
    assert not marker.exists()


def test_env_show_and_check_without_a_name_use_the_bound_environment(deploy_al, tmp_path):
    """Issue 42 item 11: ``al env show`` in a project bound to an environment (``al env set``,
    or ``$AL_ENV``, or ``-E``) shows that one; unbound, it says how to name one."""
    project = tmp_path / "proj"
    (project / "agents").mkdir(parents=True)
    (project / "config.toml").write_text("")
    assert deploy_al("env", "add", "staging", "--host", "staging.example").returncode == 0
    assert deploy_al("env", "add", "prod", "--host", "prod.example").returncode == 0
    unbound = deploy_al("env", "show", cwd=project)
    assert unbound.returncode == 2
    assert "which environment? `al env show NAME`" in unbound.stderr
    assert "`al env check NAME`" in deploy_al("env", "check", cwd=project).stderr
    assert deploy_al("env", "set", "staging", cwd=project).returncode == 0
    shown = deploy_al("env", "show", cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == deploy_al("env", "show", "staging").stdout
    assert "staging.example" in shown.stdout
    prod = deploy_al("env", "show", cwd=project, extra={"AL_ENV": "prod"}).stdout
    assert prod == deploy_al("env", "show", "prod").stdout

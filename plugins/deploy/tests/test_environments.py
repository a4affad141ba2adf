"""``al env``: environment files where and as the peer keeps them, 0600 in a 0700 directory."""

from __future__ import annotations

import json
import stat
import tomllib


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
        "error: no environment 'prod' (known: staging); create it with "
        "`al env add prod --host HOST`"
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
        ("env", "rm", "nope"): "error: no environment 'nope' (`al env ls` lists them)",
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
    from conftest import free_port

    port = free_port()  # nothing listens there
    deploy_al("env", "add", "down", "--host", "127.0.0.1", "--port", str(port), "--user", "x")
    result = deploy_al("env", "check", "down")
    assert result.returncode == 1  # unreachable: an operation failure
    assert result.stderr.startswith(
        f"error: ssh x@127.0.0.1: ssh: connect to host 127.0.0.1 port {port}"
    )
    assert "Connection refused" in result.stderr

"""``al env prov`` / ``al env deprov`` against a stand-in for each cloud's API on 127.0.0.1
(``fake_cloud``: their documented shapes, the only fake), and a real sshd as the new server:
the requests made, the firewall's rules, what is recorded as it goes, that deprov deletes only
what prov made, and failures half-way (taken back, or left for deprov)."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path

import fake_cloud
import pytest

from llamaherd.api import CredentialStore
from llamaherd.testing_ssh import free_port

pytestmark = pytest.mark.root

OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyOfSomeoneElse0000000000000000 laptop"


@pytest.fixture(params=["hetzner", "vultr"])
def cloud(request):
    server = fake_cloud.start(request.param)
    seed_others(server)
    yield server
    server.shutdown()
    server.server_close()


def seed_others(cloud) -> None:
    """What the account holds already, and deprov must never touch."""
    app = cloud.app
    if cloud.provider == "hetzner":
        app.add_key("laptop", OTHER_KEY, {})
        app.add_firewall("office", [], {"team": "web"})
        app.add_server("web-1", {"team": "web"})
    else:
        app.add_key("laptop", OTHER_KEY)
        app.add_firewall("office")
        app.add_instance("web-1", ["web"])


def others(cloud) -> dict[str, list[str]]:
    return {
        "servers": sorted(s.get("name") or s["label"] for s in cloud.servers.values()),
        "firewalls": sorted(f.get("name") or f["description"] for f in cloud.firewalls.values()),
        "keys": sorted(k["name"] for k in cloud.keys.values()),
    }


BEFORE = {"servers": ["web-1"], "firewalls": ["office"], "keys": ["laptop"]}


@pytest.fixture
def al(deploy_al, tmp_path, cloud):
    """``al(*args)`` with the cloud's API at the stand-in, its token stored, fast polling."""
    store = CredentialStore(tmp_path / "creds")
    store.write(f"{cloud.provider}_api_key", "default", {"api_key": fake_cloud.TOKEN})
    extra = {
        "AL_HETZNER_API_URL": cloud.url,
        "AL_VULTR_API_URL": cloud.url,
        "AL_PROVISION_POLL": "0.05",
    }

    def run(*args: str, timeout: float = 120):
        return deploy_al(*args, timeout=timeout, extra=extra)

    return run


def server_options(sshd, remote_user, gateway: int) -> list[str]:
    return [
        "--ssh-port", str(sshd.port), "--gateway-port", str(gateway),
        "--user", remote_user.name, "--path", "~/deploy",
        "--ssh-option", f"UserKnownHostsFile={sshd.known_hosts}",
        "--ssh-option", "StrictHostKeyChecking=yes",
    ]  # fmt: skip


def use_key_of(remote_user, tmp_path: Path) -> str:
    """The vps_ssh credential: the key sshd lets the remote user in with."""
    public = remote_user.key.with_suffix(".pub").read_text().strip()
    CredentialStore(tmp_path / "creds").write(
        "vps_ssh", "default", {"private_key": remote_user.key.read_text(), "public_key": public}
    )
    return public


def environment(tmp_path: Path) -> dict:
    return tomllib.loads((tmp_path / "envs" / "prod.toml").read_text())


def test_prov_records_the_server_and_deprov_deletes_only_that(
    cloud, al, sshd, remote_user, tmp_path
):
    public = use_key_of(remote_user, tmp_path)
    gateway = free_port()
    made = al("env", "prov", "prod", "--provider", cloud.provider,
              *server_options(sshd, remote_user, gateway))  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert "environment prod is ready" in made.stdout
    env = environment(tmp_path)
    server, pid = env["server"], env["server"]["provisionId"]
    assert {k: server[k] for k in ("host", "user", "port", "basePath", "expose", "provider")} == {
        "host": "127.0.0.1", "user": remote_user.name, "port": sshd.port,
        "basePath": "~/deploy", "expose": True, "provider": cloud.provider,
    }  # fmt: skip
    assert server["keyPath"] == str(tmp_path / "creds" / "vps_ssh" / "default" / "private_key")
    assert env["gateway"] == {"url": f"http://127.0.0.1:{gateway}", "port": gateway}
    assert all(
        r["headers"]["authorization"] == f"Bearer {fake_cloud.TOKEN}" for r in cloud.requests
    )
    if cloud.provider == "hetzner":
        labels = {"managed-by": "llamaherd", "llamaherd-environment": "prod",
                  "llamaherd-provision": pid}  # fmt: skip
        assert len(cloud.made("GET", "/v1/server_types")) == 2  # both pages were read
        (key,) = cloud.made("POST", "/v1/ssh_keys")
        assert key["body"] == {"name": "llamaherd-prod", "public_key": public, "labels": labels}
        (firewall,) = cloud.made("POST", "/v1/firewalls")
        assert firewall["body"] == {
            "name": "llamaherd-prod",
            "labels": labels,
            "rules": [
                {"direction": "in", "protocol": "tcp", "port": str(port),
                 "source_ips": ["0.0.0.0/0", "::/0"], "description": what}
                for port, what in ((sshd.port, "SSH"), (gateway, "llamaherd gateway"))
            ],
        }  # fmt: skip
        (created,) = cloud.made("POST", "/v1/servers")
        body = created["body"]
        ids = (server["hetznerSshKeyId"], server["hetznerFirewallId"], server["hetznerServerId"])
        assert {k: body[k] for k in ("name", "server_type", "image", "location", "ssh_keys",
                                     "firewalls", "labels")} == {
            "name": "llamaherd-prod", "server_type": "cx22", "image": "ubuntu-24.04",
            "location": "fsn1", "ssh_keys": [ids[0]], "firewalls": [{"firewall": ids[1]}],
            "labels": labels,
        }  # fmt: skip
        assert cloud.made("GET", r"/v1/actions/\d+")  # its create_server action, followed
        user_data = body["user_data"]
    else:
        mark = f"llamaherd-prod {pid}"
        (key,) = cloud.made("POST", "/v2/ssh-keys")
        assert key["body"] == {"name": mark, "ssh_key": public}
        (group,) = cloud.made("POST", "/v2/firewalls")
        assert group["body"] == {"description": mark}
        rules = [r["body"] for r in cloud.made("POST", r"/v2/firewalls/[0-9a-f]+/rules")]
        assert rules == [
            {"ip_type": ip, "protocol": "tcp", "subnet": net, "subnet_size": 0,
             "port": str(port), "notes": what}
            for port, what in ((sshd.port, "SSH"), (gateway, "llamaherd gateway"))
            for ip, net in (("v4", "0.0.0.0"), ("v6", "::"))
        ]  # fmt: skip
        assert len(cloud.made("GET", "/v2/plans")) == 4  # every page of plans was read
        (created,) = cloud.made("POST", "/v2/instances")
        body = created["body"]
        ids = (server["vultrSshKeyId"], server["vultrFirewallGroupId"], server["vultrInstanceId"])
        assert {k: body[k] for k in ("region", "plan", "os_id", "label", "sshkey_id",
                                     "firewall_group_id", "tags")} == {
            "region": "ewr", "plan": "vhf-2c-2gb", "os_id": 2284, "label": "llamaherd-prod",
            "sshkey_id": [ids[0]], "firewall_group_id": ids[1],
            "tags": ["llamaherd", f"llamaherd-{pid}"],
        }  # fmt: skip
        user_data = base64.b64decode(body["user_data"]).decode()
    assert user_data.startswith("#!/bin/bash\n") and f"Port {sshd.port}\n" in user_data
    assert f"useradd --create-home --shell /bin/bash {remote_user.name}" in user_data
    assert public in user_data and "touch /var/lib/llamaherd/provisioned" in user_data

    listed = al("env", "list")
    assert listed.stdout.splitlines()[1].split() == [
        "prod", f"{remote_user.name}@127.0.0.1:~/deploy", str(sshd.port)
    ]  # fmt: skip
    again = al("env", "prov", "prod", "--provider", cloud.provider)
    assert again.returncode == 2 and "exists already" in again.stderr

    gone = al("env", "deprov", "prod")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    deleted = [r["path"] for r in cloud.requests if r["method"] == "DELETE"]
    prefix = cloud.url.split("127.0.0.1:")[1].split("/", 1)[1]
    kinds = ("servers", "firewalls", "ssh_keys") if cloud.provider == "hetzner" else (
        "instances", "firewalls", "ssh-keys")  # fmt: skip
    assert deleted == [
        f"/{prefix}/{kind}/{i}" for kind, i in zip(kinds, reversed(ids), strict=True)
    ]
    assert others(cloud) == BEFORE
    assert not (tmp_path / "envs" / "prod.toml").exists()


def test_a_failed_firewall_leaves_nothing_half_made(cloud, al, sshd, remote_user, tmp_path):
    use_key_of(remote_user, tmp_path)
    if cloud.provider == "hetzner":  # someone's firewall has the name already
        cloud.app.add_firewall("llamaherd-prod", [], {})
        expected = (
            "error: Hetzner Cloud: creating the firewall: firewall with the same name already "
            "exists (HTTP 409 uniqueness_error)"
        )
    else:  # the group is made, its third rule refused
        rules = r"/v2/firewalls/[0-9a-f]+/rules"
        cloud.fail("POST", rules, 400, {"error": "Invalid port", "status": 400}, after=2)
        expected = "error: Vultr: adding a firewall rule: Invalid port (HTTP 400)"
    before = others(cloud)
    result = al("env", "prov", "prod", "--provider", cloud.provider,
                *server_options(sshd, remote_user, free_port()))  # fmt: skip
    assert result.returncode == 1  # the operation failed (nothing wrong with the command)
    assert result.stderr.strip() == expected
    assert "nothing is left on" in result.stdout
    assert others(cloud) == before  # the key it made was taken back; no server was asked for
    assert not cloud.made("POST", r"/v\d/(servers|instances)")
    assert cloud.made("DELETE", r"/v\d/(ssh_keys|ssh-keys)/.+")
    assert not (tmp_path / "envs" / "prod.toml").exists()


@pytest.mark.parametrize("cloud", ["hetzner"], indirect=True)
def test_what_could_not_be_taken_back_is_left_to_deprov(cloud, al, tmp_path, remote_user):
    use_key_of(remote_user, tmp_path)
    cloud.fail("POST", "/v1/servers", 422, {"error": {"code": "placement_error",
               "message": "no capacity in fsn1", "details": {}}})  # fmt: skip
    cloud.fail("DELETE", r"/v1/firewalls/\d+", 503, {"error": {"code": "unavailable",
               "message": "try again", "details": {}}}, times=3)  # fmt: skip
    result = al("env", "prov", "prod", "--provider", "hetzner")
    assert result.returncode == 1
    assert "placement_error" in result.stdout
    firewall_id = environment(tmp_path)["server"]["hetznerFirewallId"]
    assert result.stderr.strip() == (
        f"error: Hetzner Cloud: could not take back firewall {firewall_id} after the failure "
        "above: `al env deprov prod` deletes what is left"
    )
    env = environment(tmp_path)["server"]
    assert env["host"] == "PENDING" and "hetznerSshKeyId" not in env  # the key went
    check = al("env", "check", "prod")
    assert check.returncode == 1 and "its server has no address yet" in check.stderr
    cleaned = al("env", "deprov", "prod")
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert f"deleted firewall {firewall_id}" in cleaned.stdout
    assert others(cloud) == BEFORE and not (tmp_path / "envs" / "prod.toml").exists()


@pytest.mark.parametrize("cloud", ["hetzner"], indirect=True)
def test_a_server_whose_creation_fails_is_taken_back_with_the_rest(
    cloud, al, tmp_path, remote_user
):
    use_key_of(remote_user, tmp_path)
    cloud.failing_actions.add("create_server")
    result = al("env", "prov", "prod", "--provider", "hetzner")
    assert result.returncode == 1
    server_id = next(r for r in cloud.made("DELETE", r"/v1/servers/\d+"))["path"].rsplit("/", 1)[1]
    assert result.stderr.strip() == (
        f"error: Hetzner Cloud: creating server {server_id}: the host failed to start the server "
        "(server_error)"
    )
    assert f"deleted server {server_id}" in result.stdout
    assert others(cloud) == BEFORE and not (tmp_path / "envs" / "prod.toml").exists()


@pytest.mark.parametrize("cloud", ["hetzner"], indirect=True)
def test_a_server_that_never_runs_is_recorded_then_deleted(cloud, al, tmp_path, remote_user):
    use_key_of(remote_user, tmp_path)
    cloud.boot_polls = 10**9
    result = al("env", "prov", "prod", "--provider", "hetzner", "--timeout", "0.5")
    assert result.returncode == 1
    server_id = environment(tmp_path)["server"]["hetznerServerId"]
    assert result.stderr.strip() == (
        f"error: server {server_id} did not run within the time allowed; `al env check prod` "
        "looks again, `al env deprov prod` deletes it"
    )
    assert al("env", "deprov", "prod").returncode == 0
    assert others(cloud) == BEFORE


@pytest.mark.parametrize("cloud", ["hetzner", "vultr"], indirect=True)
def test_deprov_deletes_nothing_that_is_not_its_own(cloud, al, sshd, remote_user, tmp_path):
    use_key_of(remote_user, tmp_path)
    made = al("env", "prov", "prod", "--provider", cloud.provider,
              *server_options(sshd, remote_user, free_port()))  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    path = tmp_path / "envs" / "prod.toml"
    key = "hetznerServerId" if cloud.provider == "hetzner" else "vultrInstanceId"
    ours = str(environment(tmp_path)["server"][key])
    theirs = next(i for i in cloud.servers if i != ours)
    # Our server went by other means; the file now names someone else's (a slip, an edit).
    if cloud.provider == "hetzner":
        cloud.app.delete_server({}, ours)
        cloud.actions[max(cloud.actions, key=int)]["_then"]()
    else:
        cloud.app.gone(ours)
    quote = '"' if cloud.provider == "vultr" else ""
    text = path.read_text()
    assert f"{key} = {quote}{ours}{quote}\n" in text
    path.write_text(text.replace(f"{key} = {quote}{ours}", f"{key} = {quote}{theirs}"))
    refused = al("env", "deprov", "prod")
    assert refused.returncode != 0
    assert f"not deleting {'server' if cloud.provider == 'hetzner' else 'instance'} {theirs}" in (
        refused.stdout
    )
    assert others(cloud) == BEFORE  # its firewall and key went; web-1 is still there
    assert path.exists() and theirs in path.read_text()


@pytest.mark.parametrize("cloud", ["hetzner"], indirect=True)
def test_what_prov_needs_is_said_in_one_line(cloud, al, tmp_path):
    (tmp_path / "creds" / "hetzner_api_key" / "default" / "api_key").write_text("wrong\n")
    bad = al("env", "prov", "prod", "--provider", "hetzner")
    assert bad.returncode == 1  # the API refused: an operation failure
    assert bad.stderr.strip() == (
        "error: Hetzner Cloud: GET /server_types: unable to authenticate (HTTP 401 unauthorized)"
    )
    assert "wrong" not in bad.stdout + bad.stderr
    assert not (tmp_path / "envs" / "prod.toml").exists()
    (tmp_path / "creds" / "hetzner_api_key" / "default" / "api_key").unlink()
    missing = al("env", "prov", "prod", "--provider", "vultr")
    assert missing.returncode == 2  # a credential to add: the setup is wrong
    assert missing.stderr.strip() == (
        "error: no vultr_api_key credential: add the Vultr API token with "
        "`al creds add vultr_api_key`"
    )
    nameless = al("env", "prov", "--provider", "hetzner")
    assert nameless.stderr.strip() == "error: al env prov needs a NAME for the environment"
    clash = al("env", "prov", "prod", "--provider", "hetzner", "--gateway-port", "22")
    assert clash.stderr.strip() == "error: --gateway-port 22: that is the SSH port"

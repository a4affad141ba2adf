"""The credential store and `al creds`."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamaherd import hookimpl, plugins
from llamaherd.cli import cli
from llamaherd.commands import creds as creds_commands
from llamaherd.credentials import (
    CredentialError,
    CredentialStore,
    credential_env,
    load_for_agent,
    parse_ref,
    problems,
    secret_values,
    staged_files,
)
from llamaherd.project import load_project
from llamaherd.types import ConfigError, CredentialField, CredentialInvalid


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------- refs and names


def test_parse_ref():
    assert parse_ref("git_ssh:deploy") == ("git_ssh", "deploy")
    assert parse_ref("github_token") == ("github_token", "default")
    assert parse_ref(" github_token: ") == ("github_token", "default")


@pytest.mark.parametrize("ref", ["../x", "x:../y", "x:..", "a/b", ":x", "", ".hidden", "x:-rf"])
def test_parse_ref_rejects_paths(ref):
    with pytest.raises(CredentialError, match="invalid credential"):
        parse_ref(ref)


def test_store_never_leaves_its_root(tmp_path):
    store = CredentialStore(tmp_path / "creds")
    for args in [
        ("../x", "default", {"f": "v"}),
        ("t", "..", {"f": "v"}),
        ("t", "i", {"../f": "v"}),
    ]:
        with pytest.raises(CredentialError):
            store.write(*args)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created anywhere


# --------------------------------------------------------------------------- store


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_permissions_regardless_of_umask(tmp_path, umask):
    root = tmp_path / "creds"
    root.mkdir(mode=0o755)  # an existing, too-open root is tightened
    old = os.umask(umask)
    try:
        CredentialStore(root).write("git_ssh", "deploy", {"id_rsa": "KEY", "username": "bot"})
    finally:
        os.umask(old)
    assert mode(root) == mode(root / "git_ssh") == mode(root / "git_ssh" / "deploy") == 0o700
    for name in ("id_rsa", "username"):
        assert mode(root / "git_ssh" / "deploy" / name) == 0o600


def test_round_trip_list_exists_remove(tmp_path, monkeypatch):
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "c"))
    store = CredentialStore()
    assert store.root == tmp_path / "c"
    assert store.read("github_token") is None and not store.exists("github_token", "default")
    store.write("github_token", "default", {"token": "ghp_1"})
    store.write("git_ssh", "deploy", {"id_rsa": "-----KEY-----\nabc\n", "username": "bot"})
    store.write("git_ssh", "deploy", {"email": "bot@example.com"})  # adds a field, keeps others
    # The on-disk format existing users have: value plus newline, read back stripped.
    assert (store.root / "github_token/default/token").read_text() == "ghp_1\n"
    assert store.read("git_ssh", "deploy") == {
        "email": "bot@example.com",
        "id_rsa": "-----KEY-----\nabc",
        "username": "bot",
    }
    (store.root / "git_ssh/deploy/.id_rsa.x1.tmp").write_text("half")  # crash leftover
    # A field linked to a file kept elsewhere is read through the link.
    (tmp_path / "kept-elsewhere").write_text("linked-value\n")
    (store.root / "git_ssh/deploy/username").unlink()
    (store.root / "git_ssh/deploy/username").symlink_to(tmp_path / "kept-elsewhere")
    assert store.read("git_ssh", "deploy")["username"] == "linked-value"
    assert store.list() == [
        ("git_ssh", "deploy", ["email", "id_rsa", "username"]),
        ("github_token", "default", ["token"]),
    ]
    assert store.remove("git_ssh", "deploy") and not (store.root / "git_ssh").exists()
    assert (tmp_path / "kept-elsewhere").exists()  # removing the link keeps its target
    assert not store.remove("git_ssh", "deploy")
    assert store.list() == [("github_token", "default", ["token"])]


CRASH_WRITER = """
import sys
from pathlib import Path
from llamaherd.credentials import CredentialStore
CredentialStore(Path(sys.argv[1])).write("big", "default", {"blob": "n" * int(sys.argv[2])})
"""


def test_write_killed_midway_leaves_old_value(tmp_path):
    """SIGKILL a real writer while it writes a large value: the field is old or new, never half."""
    store = CredentialStore(tmp_path)
    directory = store.path("big", "default")
    size = 32 * 1024 * 1024
    for _attempt in range(3):
        store.write("big", "default", {"blob": "old-value"})
        proc = subprocess.Popen([sys.executable, "-c", CRASH_WRITER, str(tmp_path), str(size)])
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if any(p.name.startswith(".blob.") for p in directory.iterdir()):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.001)
        proc.wait(timeout=30)
        value = store.read("big", "default")["blob"]
        assert value == "old-value" or value == "n" * size
        if proc.returncode == -signal.SIGKILL and value == "old-value":
            break
    else:
        pytest.fail("the writer was never caught mid-write")
    # Its unfinished temp file is left behind as a dotfile: never listed or read as a field.
    (leftover,) = [p for p in directory.iterdir() if p.name.startswith(".blob.")]
    assert store.list() == [("big", "default", ["blob"])]
    # The next write removes it once it is clearly stale (a fresh one may be a live writer's).
    store.write("big", "default", {"other": "x"})
    assert leftover.exists()
    os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    store.write("big", "default", {"other": "y"})
    assert not leftover.exists()


# --------------------------------------------------------------------------- a demo plugin


class DemoToken:
    name = "demo_token"
    description = "single-field demo"
    fields = [CredentialField("token", secret=True, description="the token")]

    def env(self, values, path):
        return {"DEMO_TOKEN": values["token"], "DEMO_TOKEN_FILE": str(path / "token")}

    def context(self, values):
        return "demo token in DEMO_TOKEN"

    def validate(self, values):
        # Stands in for a service: tokens starting "good" are accepted.
        if not values["token"].startswith("good"):
            raise CredentialInvalid(f"service refused {values['token']}")
        return "accepted"


class DemoPair:
    name = "demo_pair"
    description = "two-field demo"
    fields = [CredentialField("key", secret=True), CredentialField("user", secret=False)]
    file_modes = {"key": 0o600}

    def env(self, values, path):
        return {"DEMO_USER": values["user"]}

    def context(self, values):
        return f"demo pair for {values['user']}"


class DemoModelKey(DemoToken):
    name = "demo_model_key"
    sandbox = False


class DemoPlugin:
    @hookimpl
    def register_credential_types(self, register):
        for credential_type in (DemoToken(), DemoPair(), DemoModelKey()):
            register(credential_type)


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """Built-ins plus the demo plugin only; credentials under tmp_path/creds."""
    monkeypatch.setenv("AL_NO_ENTRYPOINTS", "1")
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    plugins.reset()
    manager = plugins.get_manager()
    manager.register(DemoPlugin(), "demo")
    creds_commands.register(cli)
    try:
        yield manager.registry()
    finally:
        manager.unregister("demo")
        plugins.reset()


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), input=input, env=env)


def make_project(root: Path, credentials: list[str]) -> Path:
    agent = root / "agents" / "worker"
    agent.mkdir(parents=True)
    (root / "config.toml").write_text("")
    (agent / "SKILL.md").write_text("---\nname: worker\ndescription: d\n---\nWork.\n")
    (agent / "config.toml").write_text(f"credentials = {json.dumps(credentials)}\n")
    return root


# --------------------------------------------------------------------------- al creds add


def test_add_from_env_single_field(registry):
    result = invoke(
        "creds", "add", "demo_token:ci", "--from-env", "MY_TOKEN", env={"MY_TOKEN": "tok-from-env"}
    )
    assert result.exit_code == 0, result.output
    assert "tok-from-env" not in result.output
    assert "added demo_token:ci (token)" in result.output
    assert CredentialStore().read("demo_token", "ci") == {"token": "tok-from-env"}


def test_add_from_env_and_file_per_field(registry, tmp_path):
    key_file = tmp_path / "key=with-equals"
    key_file.write_text("-----KEY-----\nsecretbody\n")
    result = invoke(
        "creds",
        "add",
        "demo_pair",
        "--file",
        f"key={key_file}",
        "--from-env",
        "user=WHO",
        env={"WHO": "alice"},
    )
    assert result.exit_code == 0, result.output
    assert "secretbody" not in result.output
    assert CredentialStore().read("demo_pair") == {
        "key": "-----KEY-----\nsecretbody",
        "user": "alice",
    }


def test_add_file_single_field_path_may_contain_equals(registry, tmp_path):
    token_file = tmp_path / "a=b"
    token_file.write_text("tok-from-file\n")
    result = invoke("creds", "add", "demo_token", "--file", str(token_file))
    assert result.exit_code == 0, result.output
    assert CredentialStore().read("demo_token") == {"token": "tok-from-file"}


def test_add_file_dash_reads_stdin(registry):
    result = invoke(
        "creds",
        "add",
        "demo_pair",
        "--file",
        "key=-",
        "--from-env",
        "user=U",
        input="piped-secret\n",
        env={"U": "dora"},
    )
    assert result.exit_code == 0, result.output
    assert "piped-secret" not in result.output
    assert CredentialStore().read("demo_pair") == {"key": "piped-secret", "user": "dora"}


def test_add_prompts_hidden_for_secret_fields(registry):
    result = invoke("creds", "add", "demo_pair:p", input="\n   \nhidden-secret-value\nbob\n")
    assert result.exit_code == 0, result.output
    assert "hidden-secret-value" not in result.output
    assert "bob" in result.output  # non-secret fields are typed visibly
    assert "a value is required" in result.output  # a blank answer is asked again
    assert CredentialStore().read("demo_pair", "p") == {"key": "hidden-secret-value", "user": "bob"}
    again = invoke(
        "creds",
        "add",
        "demo_pair:p",
        "--from-env",
        "key=K",
        "--from-env",
        "user=U",
        env={"K": "k2-secret", "U": "carol"},
    )
    assert "replaced demo_pair:p" in again.output


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["demo_pair", "--from-env", "K"],
            {"K": "v"},
            "demo_pair has fields key, user; use --from-env FIELD=VAR",
        ),
        (["demo_pair", "--from-env", "nope=K"], {"K": "v"}, "use --from-env FIELD=VAR"),
        (
            ["demo_token", "--from-env", "UNSET_VAR_X"],
            {},
            "environment variable UNSET_VAR_X (for field 'token') is not set",
        ),
        (
            ["demo_token", "--file", "/nonexistent/t"],
            {},
            "--file /nonexistent/t (for field 'token'): No such file",
        ),
        (
            ["demo_token", "--file", "/x", "--from-env", "V"],
            {"V": "v"},
            "given by both --from-env and --file",
        ),
        (["anthropic_key"], {}, "it is provided by llamaherd-anthropic"),
        (["never_heard_of"], {}, "no installed plugin provides it"),
        (["../etc"], {}, "invalid credential type name '../etc'"),
    ],
)
def test_add_errors_are_one_line(registry, args, env, message):
    result = invoke("creds", "add", *args, env=env)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output and "v\n" not in result.output


# --------------------------------------------------------------------------- ls, rm, types, test


def test_ls_shows_fields_and_agents_never_values(registry, tmp_path):
    store = CredentialStore()
    store.write("demo_token", "default", {"token": "ls-secret-value"})
    store.write("demo_pair", "unused", {"key": "ls-secret-2", "user": "u"})
    project = make_project(tmp_path / "proj", ["demo_token", "demo_pair:absent"])
    result = invoke("--project", str(project), "creds", "ls", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {
            "type": "demo_pair",
            "instance": "absent",
            "fields": [],
            "stored": False,
            "agents": ["worker"],
            "used_by": ["worker"],
        },
        {
            "type": "demo_pair",
            "instance": "unused",
            "fields": ["key", "user"],
            "stored": True,
            "agents": [],
            "used_by": [],
        },
        {
            "type": "demo_token",
            "instance": "default",
            "fields": ["token"],
            "stored": True,
            "agents": ["worker"],
            "used_by": ["worker"],
        },
    ]
    table = invoke("--project", str(project), "creds", "ls")
    assert "missing" in table.output and "worker" in table.output
    assert "ls-secret" not in table.output + result.output


def test_ls_outside_a_project(registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "no credentials in" in invoke("creds", "ls").output


def test_rm(registry):
    CredentialStore().write("demo_token", "x", {"token": "t"})
    assert invoke("creds", "rm", "demo_token:x").output == "removed demo_token:x\n"
    result = invoke("creds", "rm", "demo_token:x")
    assert result.exit_code == 2 and "no credential demo_token:x" in result.output


def test_types_lists_fields_and_env_names(registry):
    result = invoke("creds", "types", "--json")
    rows = {row["type"]: row for row in json.loads(result.output)}
    assert rows["demo_token"]["env"] == ["DEMO_TOKEN", "DEMO_TOKEN_FILE"]
    assert rows["demo_token"]["plugin"] == "demo" and rows["demo_token"]["validates"]
    assert rows["demo_pair"]["fields"] == [
        {"name": "key", "secret": True, "description": ""},
        {"name": "user", "secret": False, "description": ""},
    ]
    assert rows["demo_model_key"]["staged"] is False
    table = invoke("creds", "types").output
    assert "key (secret), user" in table and "(not staged into runs)" in table


def test_test_command_ok_failure_and_missing(registry):
    store = CredentialStore()
    store.write("demo_token", "good", {"token": "good-token-1"})
    store.write("demo_token", "bad", {"token": "bad-token-1"})
    store.write("demo_pair", "half", {"user": "u"})
    ok = invoke("creds", "test", "demo_token:good")
    assert (ok.exit_code, ok.output) == (0, "ok: demo_token:good: accepted\n")
    bad = invoke("creds", "test", "demo_token:bad")
    assert bad.exit_code == 1
    assert bad.output == "failed: demo_token:bad: service refused ***\n"  # never the value
    half = invoke("creds", "test", "demo_pair:half")
    assert half.exit_code == 1 and "missing field(s) key" in half.output
    absent = invoke("creds", "test", "demo_token:absent")
    assert absent.exit_code == 2 and "`al creds add demo_token:absent`" in absent.output


# --------------------------------------------------------------------------- agents and runs


def test_problems_and_load_for_agent(registry, tmp_path):
    store = CredentialStore()
    project = load_project(
        make_project(
            tmp_path / "p",
            ["demo_token", "demo_pair:deploy", "demo_model_key", "openai_key", "x:../y"],
        )
    )
    agent = project.agent("worker")
    store.write("demo_token", "default", {"token": "t0ken"})
    store.write("demo_model_key", "default", {"token": "model-key"})
    found = [str(e) for e in problems(agent, registry, store)]
    assert len(found) == 3
    assert found[0].endswith(
        "credentials[1]: credential 'demo_pair:deploy' is not in "
        f"{store.root}; add it with `al creds add demo_pair:deploy`"
    )
    assert (
        "credentials[3]: unknown credential type 'openai_key': it is provided by llamaherd-openai"
        in found[1]
    )
    assert "credentials[4]: invalid credential instance name '../y'" in found[2]
    with pytest.raises(ConfigError, match="demo_pair:deploy"):
        load_for_agent(agent, registry, store)

    (agent.config_file).write_text(
        'credentials = ["demo_token", "demo_pair:deploy", "demo_model_key"]\n'
    )
    agent = load_project(project.root).agent("worker")
    store.write("demo_pair", "deploy", {"key": "k3y-value", "user": "bot"})
    staged = load_for_agent(agent, registry, store)
    # The model key (sandbox = False) is never staged.
    assert staged == {
        "demo_token/default": {"token": "t0ken"},
        "demo_pair/deploy": {"key": "k3y-value", "user": "bot"},
    }
    assert credential_env(registry.credential_types, staged, "/credentials") == {
        "DEMO_TOKEN": "t0ken",
        "DEMO_TOKEN_FILE": "/credentials/demo_token/default/token",
        "DEMO_USER": "bot",
    }
    assert sorted(secret_values(registry.credential_types, staged)) == ["k3y-value", "t0ken"]
    assert staged_files(registry.credential_types["demo_pair"], staged["demo_pair/deploy"]) == [
        ("key", b"k3y-value\n", 0o600),
        ("user", b"bot\n", 0o400),
    ]

"""What a push ships, worked out locally: files as git sees them, exactly the plugins and the
credentials the project uses; and the server helper's refusal of a hostile archive."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from llamaherd_deploy import plan, ssh
from llamaherd_deploy.push import merge_requirements

from llamaherd.api import CredentialStore, LlamaherdError, load_project
from llamaherd.plugins import registry
from llamaherd.shared_dir import shared_files

HELPER = Path(plan.__file__).with_name("helper.py")


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


LAYOUT = {
    "config.toml": "",
    ".gitignore": "*.log\n/build/\n",
    "agents/a/SKILL.md": "---\nname: a\n---\nA\n",
    "agents/a/.gitignore": "scratch.txt\n",
    "agents/a/scratch.txt": "x",
    "agents/a/notes.log": "x",
    "agents/a/tool.sh": "#!/bin/sh\n",
    "agents/b/SKILL.md": "---\nname: b\n---\nB\n",
    "build/out.bin": "x",
    ".al/work-queue.db": "x",  # not ignored here, and still never shipped
    ".env.toml": 'environment = "prod"\n',  # this machine's: the server gets its own
    # shared/ travels as runs see it (issue 42 item 15): whatever git ignores, and without
    # what runs leave out (hidden files, hidden directories), even when git would commit it.
    "shared/conventions.md": "# Conventions\n",
    "shared/deep/notes.log": "ignored by git, read by agents\n",
    "shared/.cache/x.log": "x",
    "shared/.draft.md": "not ignored by git, never seen by a run\n",
    "shared/deep/.env": "SECRET=1\n",
}
SHIPPED = [".gitignore", "agents/a/.gitignore", "agents/a/SKILL.md", "agents/a/tool.sh",
           "agents/b/SKILL.md", "config.toml", "shared/conventions.md",
           "shared/deep/notes.log"]  # fmt: skip


@pytest.mark.parametrize("repository", [True, False], ids=["git-repo", "plain-dir"])
def test_files_are_what_git_would_commit(tmp_path, repository):
    root = tmp_path / "p"
    write(root, LAYOUT)
    (root / "agents/a/tool.sh").chmod(0o755)
    if repository:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "add", "config.toml"], check=True)
    outside = tmp_path / "elsewhere.md"
    outside.write_text("not the project's\n")
    (root / "shared/linked.md").symlink_to(outside)  # runs leave out a link out of the project
    files = plan.project_files(root)
    assert sorted(files) == SHIPPED
    runs_see = {f"shared/{file.path}" for file in shared_files(root)[0]}
    assert {rel for rel in files if rel.startswith("shared/")} == runs_see
    assert files["agents/a/tool.sh"].executable and not files["config.toml"].executable
    # A one-agent push: that agent and shared/, which it may read.
    assert sorted(plan.project_files(root, plan.scope_of("a"))) == [
        "agents/a/.gitignore", "agents/a/SKILL.md", "agents/a/tool.sh", "shared/conventions.md",
        "shared/deep/notes.log",
    ]  # fmt: skip


def offline_project(root: Path, agents: dict[str, str]) -> object:
    write(
        root,
        {
            "config.toml": '[models.s]\nprovider = "scripted"\nmodel = "s"\n'
            '[webhooks.hook]\ntype = "generic"\n',
            **{f"agents/{n}/SKILL.md": f"---\nname: {n}\n---\nx\n" for n in agents},
            **{f"agents/{n}/config.toml": cfg for n, cfg in agents.items()},
        },
    )
    return load_project(root)


def test_exactly_the_plugins_the_project_uses(tmp_path):
    needed = {"providers": "scripted", "runtimes": "host-user", "webhook_sources": "generic"}
    for kind, name in needed.items():
        if name not in getattr(registry(), kind):
            pytest.skip(f"needs the plugin providing {name}")
    agent = 'models = ["s"]\nruntime = { type = "host-user" }\n[[webhooks]]\nsource = "hook"\n'
    project = offline_project(tmp_path / "p", {"a": agent})
    used = plan.needed_plugins(project, registry())
    assert {"scripted", "host-user", "webhooks"} <= used
    assert not used & {"anthropic", "openai", "cron", "docker", "github"}
    reqs = plan.requirements(project, registry(), None)
    assert "llamaherd==0.1.0" in reqs and "llamaherd-deploy==0.1.0" in reqs
    assert "llamaherd-anthropic==0.1.0" not in reqs
    if "github_token" in registry().credential_types:  # its skill speaks to an agent using it
        with_token = 'credentials = ["github_token"]\n' + agent
        project = offline_project(tmp_path / "q", {"a": with_token})
        assert "github" in plan.needed_plugins(project, registry())


def test_only_the_referenced_credentials_travel(tmp_path, monkeypatch):
    if "webhook_secret" not in registry().credential_types:
        pytest.skip("needs llamaherd-webhooks")
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "creds"))
    store = CredentialStore()
    store.write("webhook_secret", "default", {"secret": "s3cret"})
    store.write("webhook_secret", "unused", {"secret": "other"})
    agent = 'models = ["s"]\nruntime = { type = "host-user" }\n[[webhooks]]\nsource = "hook"\n'
    project = offline_project(
        tmp_path / "p", {"a": agent, "b": 'credentials = ["x_token:ci"]\n' + agent}
    )
    assert plan.credential_files(project, registry(), ["a"]) == {
        "webhook_secret/default/secret": b"s3cret\n"
    }
    with pytest.raises(LlamaherdError) as missing:
        plan.credential_files(project, registry(), None)
    assert str(missing.value) == (
        f"cannot push: credential(s) x_token:ci not in {tmp_path / 'creds'}; add them with "
        "`al creds add x_token:ci`"
    )


def test_a_one_agent_push_keeps_the_other_pins():
    merged = merge_requirements(
        ["llamaherd==0.1.0", "llamaherd-cron==0.1.0"], ["llamaherd[postgres]==0.2.0", "x==1"]
    )
    assert merged == ["llamaherd-cron==0.1.0", "llamaherd[postgres]==0.2.0", "x==1"]


def test_changes_between_here_and_there():
    changes = plan.Changes.between({"a": 1, "b": 2, "c": 3}, {"b": 2, "c": 4, "d": 5})
    assert (changes.added, changes.changed, changes.removed) == (["a"], ["c"], ["d"])
    assert changes.summary() == "1 new, 1 changed, 1 removed"
    assert not plan.Changes.between({"a": 1}, {"a": 1})


def test_the_bootstrap_survives_single_quoting():
    assert "'" not in ssh.BOOTSTRAP


def helper(request: dict, payload: bytes = b"") -> tuple[int, dict]:
    source = HELPER.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", ssh.BOOTSTRAP],
        input=b"%d\n" % len(source) + source + json.dumps(request).encode() + b"\n" + payload,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def archive(members: dict[str, bytes], kind: bytes = tarfile.REGTYPE) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.type = len(content), kind
            if kind == tarfile.SYMTYPE:
                info.size, info.linkname = 0, "/etc/passwd"
            tar.addfile(info, io.BytesIO(content) if kind == tarfile.REGTYPE else None)
    return buffer.getvalue()


def test_the_helper_unpacks_uploads_and_refuses_escapes(tmp_path):
    base = tmp_path / "deploy"
    code, answer = helper(
        {"op": "upload", "base": str(base), "id": "r1"},
        archive({"files/agents/a/SKILL.md": b"hi", "credentials/t/default/token": b"s\n"}),
    )
    assert (code, answer) == (0, {"files": 2})
    incoming = base / "incoming" / "r1"
    assert (incoming / "files/agents/a/SKILL.md").read_bytes() == b"hi"
    assert oct((incoming / "credentials/t/default/token").stat().st_mode & 0o777) == "0o600"
    for members, kind in (
        ({"files/../../escape": b"x"}, tarfile.REGTYPE),
        ({"/etc/evil": b"x"}, tarfile.REGTYPE),
        ({"elsewhere/x": b"x"}, tarfile.REGTYPE),
        ({"files/link": b""}, tarfile.SYMTYPE),
    ):
        code, answer = helper(
            {"op": "upload", "base": str(base), "id": "r2"}, archive(members, kind)
        )
        assert code == 1 and answer["error"].startswith("refusing archive member"), answer
    assert not (tmp_path / "escape").exists()


def test_the_helper_probes_without_changing_anything(tmp_path):
    base = tmp_path / "nothing-here" / "deploy"
    code, answer = helper({"op": "probe", "base": str(base), "nonce": "n"})
    assert code == 0
    assert answer["python"][:2] == list(sys.version_info[:2]) and answer["deployed"] is None
    assert answer["writable"] and answer["free"] > 0
    assert answer["service"]["mode"] in ("system", "user", "supervised")
    assert not (tmp_path / "nothing-here").exists()
    code, answer = helper({"op": "status", "base": str(base)})
    assert code == 1 and answer["error"].startswith(f"no scheduler is running in {base}")

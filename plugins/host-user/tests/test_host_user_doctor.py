"""`al doctor`'s host-user check: each agent user exists; `--fix` creates a missing one."""

from __future__ import annotations

import json
import pwd
import subprocess
import uuid

import pytest

pytestmark = pytest.mark.root


def _project(tmp_project, user):
    tmp_project.config("[gateway]\nport = 0\n")
    tmp_project.add_agent("a", f'[runtime]\ntype = "host-user"\nrun_as = "{user}"\n')
    tmp_project.add_agent("b", f'[runtime]\ntype = "host-user"\nrun_as = "{user}"\n')
    return tmp_project


def _findings(result):
    assert result.stdout, result.stderr
    return [f for f in json.loads(result.stdout)["findings"] if f["check"] == "host-user"]


@pytest.fixture
def missing_user():
    name = f"al-doc-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["userdel", name], capture_output=True)


def test_a_missing_user_is_an_error_that_fix_creates(tmp_project, al, missing_user):
    project = _project(tmp_project, missing_user)
    result = al("doctor", "--json", cwd=project.root)
    assert result.returncode == 1
    (found,) = _findings(result)  # one finding per user, naming its agents
    assert found["subject"] == f"user {missing_user} (agents/a, agents/b)"
    assert found["status"] == "error" and "does not exist" in found["message"]
    assert found["fix"].startswith(f"create system user {missing_user!r}")
    fixed = al("doctor", "--fix", "--yes", cwd=project.root)
    assert f"created system user {missing_user!r}" in fixed.stderr
    assert pwd.getpwnam(missing_user).pw_shell == "/bin/sh"
    (after,) = _findings(al("doctor", "--json", cwd=project.root))
    assert after["status"] == "ok" and "exists (uid" in after["message"]


def test_only_host_user_agents_are_checked(tmp_project, al):
    tmp_project.config("[gateway]\nport = 0\n")
    tmp_project.add_agent("c", '[runtime]\ntype = "container"\n')
    assert _findings(al("doctor", "--json", cwd=tmp_project.root)) == []

"""``al add owner/repo`` from a local bare git repository laid out like a public Action Llama
skills repo (``agents/<name>/`` with a root config.toml), reached through ``AL_GITHUB_URL``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llamaherd.testing import TmpProject

from .conftest import store_credentials

REPO_CONFIG = """\
[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-20250514"
thinkingLevel = "medium"
authType = "api_key"

[webhooks.github]
type = "github"
credential = "action-llama"
"""
SKILLS = {
    "dev": "Picks up GitHub issues and implements the requested changes",
    "planner": "Writes implementation plans",
    "reviewer": "Reviews pull requests",
}
AGENT_CONFIG = """\
models = ["sonnet"]  # the repo's own model name
credentials = ["github_token"]

[[webhooks]]
source = "github"
events = ["pull_request"]
"""


def git(*args: str, cwd: Path | None = None) -> None:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def github(tmp_path: Path) -> dict[str, str]:
    """``$AL_GITHUB_URL`` serving ``acme/agents`` (a bare repo) over file://."""
    work = tmp_path / "work"
    (work / "agents").mkdir(parents=True)
    (work / "config.toml").write_text(REPO_CONFIG)
    (work / "README.md").write_text("# Agents\n")
    for name, description in SKILLS.items():
        folder = work / "agents" / name
        folder.mkdir()
        (folder / "SKILL.md").write_text(f"---\ndescription: {description}\n---\n\nDo it.\n")
        (folder / "config.toml").write_text(AGENT_CONFIG)
    (work / "agents" / "reviewer" / "Dockerfile").write_text("FROM al-agent:latest\n")
    git("init", "-q", str(work))
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "agents", cwd=work)
    served = tmp_path / "github"
    (served / "acme").mkdir(parents=True)
    git("clone", "-q", "--bare", str(work), str(served / "acme" / "agents.git"))
    store_credentials(tmp_path / "credentials")
    return {"AL_GITHUB_URL": f"file://{served}"}


def test_without_an_agent_name_the_choices_are_listed(github, tmp_project, al):
    result = al("add", "acme/agents", cwd=tmp_project.root, env=github)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: acme/agents holds 3 skills, pick one with -a NAME: "
        "dev (agents/dev): Picks up GitHub issues and implements the requested changes; "
        "planner (agents/planner): Writes implementation plans; "
        "reviewer (agents/reviewer): Reviews pull requests"
    )
    assert not any((tmp_project.root / "agents").iterdir())


def test_an_agent_is_installed_with_its_names_fitted_to_the_project(github, tmp_project, al):
    tmp_project.config(
        '[models.claude]\nprovider = "anthropic"\nmodel = "claude-sonnet-4-20250514"\n\n'
        '[webhooks.gh]\ntype = "github"\ncredential = "MyOrg"\n'
    )
    # Its credentials are a power a fetched config grants: shown, and taken with --yes.
    result = al("add", "acme/agents", "-a", "reviewer", "--yes", cwd=tmp_project.root, env=github)
    assert result.returncode == 0, result.stderr
    assert "credentials = ['github_token']" in result.stderr
    assert result.stdout.splitlines() == [
        "models: sonnet -> claude (same provider and model)",
        "webhooks: source github -> gh (type github)",
        "added agents/reviewer from acme/agents#agents/reviewer",
    ]
    agent = tmp_project.root / "agents" / "reviewer"
    assert (agent / "Dockerfile").is_file() and (agent / "SKILL.md").is_file()
    assert (agent / "config.toml").read_text() == (
        'models = ["claude"]  # the repo\'s own model name\n'
        'credentials = ["github_token"]\n'
        'source = "acme/agents#agents/reviewer" # where `al add` got this skill\n\n'
        '[[webhooks]]\nsource = "gh"\nevents = ["pull_request"]\n'
    )
    assert not (tmp_project.root / "agents" / "dev").exists()
    checked = al("validate", cwd=tmp_project.root)
    assert checked.returncode == 0, checked.stdout
    assert "ok  agents/reviewer" in checked.stdout
    # The recorded source installs the same skill again.
    again = al(
        "add",
        "acme/agents#agents/reviewer",
        "--name",
        "reviewer2",
        "--yes",
        cwd=tmp_project.root,
        env=github,
    )
    assert again.returncode == 0, again.stderr


def test_what_cannot_be_fitted_is_said_exactly(github, tmp_project: TmpProject, al):
    result = al("add", "acme/agents", "--agent", "planner", "-y", cwd=tmp_project.root, env=github)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "to do: add to config.toml:",
        "[models.sonnet]",
        'provider = "anthropic"',
        'model = "claude-sonnet-4-20250514"',
        'thinkingLevel = "medium"',
        'authType = "api_key"',
        "to do: add to config.toml:",
        "[webhooks.github]",
        'type = "github"',
        'credential = "action-llama"',
        "added agents/planner from acme/agents#agents/planner",
    ]
    # Doing exactly that makes the project valid.
    (tmp_project.root / "config.toml").write_text(REPO_CONFIG)
    assert al("validate", cwd=tmp_project.root).returncode == 0

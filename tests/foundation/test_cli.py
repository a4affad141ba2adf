"""The project commands through the real ``al`` in subprocesses: bad input never tracebacks."""

from __future__ import annotations

import json
import subprocess

import pytest

from llamaherd.install import needs
from llamaherd.testing import fake_distribution

FIRST_PARTY = [
    "anthropic",
    "cron",
    "dashboard",
    "docker",
    "github",
    "host-user",
    "openai",
    "scripted",
    "webhooks",
]
NO_PLUGINS = {"AL_LOAD_PLUGINS": ""}  # an empty allowlist: core only


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout


def test_new_then_validate_exits_0(al, tmp_path):
    created = al("new", str(tmp_path / "p"))
    assert created.returncode == 0, created.stderr
    result = al("validate", cwd=tmp_path / "p")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok  agents/hello" in result.stdout.splitlines()


def test_new_refuses_a_non_empty_directory(al, tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "notes.txt").write_text("mine")
    result = al("new", str(tmp_path / "p"))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"error: {tmp_path / 'p'}: exists and is not empty; choose a new directory"
    )
    assert (tmp_path / "p" / "notes.txt").read_text() == "mine"


def test_new_scaffold_documents_the_real_defaults(al, tmp_path):
    """The commented defaults in the scaffold's config.toml are the schema's defaults."""
    al("new", str(tmp_path / "p"))
    text = (tmp_path / "p" / "config.toml").read_text()
    project = json.loads(al("schema", "--project", env=NO_PLUGINS).stdout)["properties"]
    for key in (
        "maxReruns",
        "maxCallDepth",
        "workQueueSize",
        "resourceLockTimeout",
        "defaultWaitTimeout",
        "historyRetentionDays",
        "database",
    ):
        assert f"# {key} = {json.dumps(project[key]['default'])}" in text
    assert (tmp_path / "p" / ".gitignore").read_text().splitlines()[-1] == ".al/"


def test_validate_reports_parse_errors_one_line_each(al, tmp_project):
    tmp_project.add_agent("toml", 'models = ["m"\nscale = 1\n')
    tmp_project.add_agent("yaml", "", skill="---\nname: [x\n---\n")
    (tmp_project.root / "agents" / "notes").mkdir()  # no SKILL.md: ignored
    result = al("validate", cwd=tmp_project.root, env=NO_PLUGINS)
    no_traceback(result)
    assert result.returncode == 2
    out = result.stdout.splitlines()
    assert (
        out[0].startswith("agents/toml/config.toml: invalid TOML: ")
        and "(at line 2, column " in out[0]
    )
    assert out[1].startswith("agents/yaml/SKILL.md: invalid YAML frontmatter at line 2, column ")
    assert len(out) == 2
    assert "notes" not in result.stdout


def test_malformed_root_config_is_one_line(al, tmp_project):
    tmp_project.config("[models.x\n")
    result = al("validate", cwd=tmp_project.root, env=NO_PLUGINS)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stderr.startswith("error: config.toml: invalid TOML: ")
    assert "line 1, column" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_missing_plugins_and_typos_are_named(al, tmp_project):
    tmp_project.config('[models.main]\nprovider = "anthropic"\nmodel = "claude"\n')
    tmp_project.add_agent("hello", 'models = ["main"]\nschedule = "0 * * * *"\nscael = 2\n')
    result = al("validate", cwd=tmp_project.root, env=NO_PLUGINS)
    no_traceback(result)
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f'config.toml: models.main.provider: provider "anthropic" {needs("llamaherd-anthropic")}',
        f"agents/hello/config.toml: schedule: {needs('llamaherd-cron')}",
        'agents/hello/config.toml: runtime.type: runtime "container" (the default) '
        + needs("llamaherd-docker"),
        'agents/hello/config.toml: scael: unknown key (did you mean "scale"?)',
    ]


def test_validate_named_agents(al, tmp_project):
    tmp_project.add_agent("hello", 'models = ["m"]\n')
    result = al("validate", "nope", cwd=tmp_project.root, env=NO_PLUGINS)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("nope: no such agent (agents: hello)")


def test_schema_prints_both_documents(al):
    result = al("schema", env=NO_PLUGINS)
    assert result.returncode == 0
    documents = json.loads(result.stdout)
    assert set(documents) == {"project", "agent"}
    agent = json.loads(al("schema", "--agent", env=NO_PLUGINS).stdout)
    assert agent["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert agent["properties"]["onInterrupted"]["enum"] == ["requeue", "fail"]


def test_plugins_lists_every_first_party_distribution(al):
    result = al("plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    for name in FIRST_PARTY:
        assert rows[name]["distribution"] == f"llamaherd-{name}"
        assert rows[name]["version"]
    assert not any(row.get("builtin") for row in rows.values())
    everything = json.loads(al("plugins", "--json", "--all").stdout)
    assert any(row["builtin"] and row["distribution"] == "llamaherd" for row in everything)


def test_plugins_table_says_when_a_plugin_registers_nothing(al, tmp_path):
    site = tmp_path / "site"
    fake_distribution(site, "llamaherd-empty", "empty", "llamaherd_empty", "")
    result = al("plugins", env={"PYTHONPATH": str(site), "AL_LOAD_PLUGINS": "empty"})
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("empty ")]
    assert row.split() == ["empty", "llamaherd-empty", "1.0", "registers", "nothing"]


def test_a_plugin_whose_import_raises_is_one_warning(al, tmp_path, tmp_project):
    site = tmp_path / "site"
    fake_distribution(
        site, "llamaherd-broken", "broken", "llamaherd_broken", "raise RuntimeError('boom')\n"
    )
    env = {"PYTHONPATH": str(site)}
    tmp_project.add_agent("hello", 'models = ["m"]\n')
    for args in (["--help"], ["plugins"], ["schema"]):
        result = al(*args, cwd=tmp_project.root, env=env)
        no_traceback(result)
        assert result.returncode == 0, result.stderr
        assert (
            "warning: plugin 'broken' failed to load: RuntimeError: boom"
            in result.stderr.splitlines()
        )
    listed = {row["name"]: row for row in json.loads(al("plugins", "--json", env=env).stdout)}
    assert listed["broken"]["error"] == "RuntimeError: boom"
    assert listed["broken"]["distribution"] == "llamaherd-broken"
    assert listed["cron"]["error"] is None
    table = al("plugins", env=env).stdout
    assert "failed to load: RuntimeError: boom" in table


def test_a_plugin_implementing_an_unknown_hook_is_dropped_with_one_warning(al, tmp_path):
    site = tmp_path / "site"
    code = """
    from llamaherd import hookimpl

    @hookimpl
    def register_trigger_type(register):  # a typo: the hook is register_trigger_types
        pass
    """
    fake_distribution(site, "llamaherd-typo", "typo", "llamaherd_typo", code)
    result = al("plugins", "--json", env={"PYTHONPATH": str(site)})
    no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert "plugin 'typo' ignored: unknown hook 'register_trigger_type'" in result.stderr
    listed = {row["name"]: row for row in json.loads(result.stdout)}
    assert "register_trigger_type" in listed["typo"]["error"]
    assert listed["cron"]["error"] is None


# --------------------------------------------------------------------------- al add

SKILL = "---\nname: triage\ndescription: Triage new issues.\n---\nLabel issues.\n"


@pytest.fixture
def skill_repo(tmp_path):
    """A bare git repo (served over file://) holding a skill at its root and one in skills/fix."""
    work = tmp_path / "work"
    (work / "skills" / "fix").mkdir(parents=True)
    (work / "SKILL.md").write_text(SKILL)
    (work / "notes.md").write_text("extra file\n")
    (work / "skills" / "fix" / "SKILL.md").write_text("---\ndescription: Fix bugs.\n---\nFix.\n")
    (work / "skills" / "fix" / "config.toml").write_text('models = ["shipped"]\n')
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "skills"], check=True)
    bare = tmp_path / "skills.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return f"file://{bare}"


def test_add_from_a_git_url(al, tmp_project, skill_repo):
    tmp_project.config('[models.fast]\nprovider = "openai"\nmodel = "gpt"\n')
    ambiguous = al("add", skill_repo, cwd=tmp_project.root)
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.strip() == (
        f"error: {skill_repo} holds 2 skills, pick one with -a NAME: "
        "triage (root): Triage new issues.; fix (skills/fix): Fix bugs."
    )
    result = al("add", skill_repo, "-a", "triage", cwd=tmp_project.root)
    assert result.returncode == 0, result.stderr
    agent = tmp_project.root / "agents" / "triage"
    assert (agent / "SKILL.md").read_text() == SKILL
    assert (agent / "notes.md").exists() and not (agent / ".git").exists()
    config = (agent / "config.toml").read_text()
    assert f'source = "{skill_repo}"' in config.splitlines()
    assert 'models = ["fast"]' in config.splitlines()


def test_add_a_subdirectory_keeps_its_own_config(al, tmp_project, skill_repo):
    result = al("add", f"{skill_repo}#skills/fix", cwd=tmp_project.root)
    assert result.returncode == 0, result.stderr
    assert (tmp_project.root / "agents" / "fix" / "config.toml").read_text() == (
        f'models = ["shipped"]\nsource = "{skill_repo}#skills/fix" # where `al add` got this skill\n'
    )
    assert (
        'to do: add a [models.shipped] table to config.toml (provider = "...", model = "...")'
        in (result.stdout)
    )


def test_add_refuses_to_overwrite_without_force(al, tmp_project, skill_repo):
    assert al("add", skill_repo, "-a", "triage", cwd=tmp_project.root).returncode == 0
    (tmp_project.root / "agents" / "triage" / "local.txt").write_text("mine")
    again = al("add", skill_repo, "-a", "triage", cwd=tmp_project.root)
    assert again.returncode == 2
    assert again.stderr.strip() == "error: agents/triage already exists; use --force to replace it"
    assert (tmp_project.root / "agents" / "triage" / "local.txt").exists()
    forced = al(
        "add", skill_repo, "-a", "triage", "--force", "--name", "triage", cwd=tmp_project.root
    )
    assert forced.returncode == 0, forced.stderr
    assert not (tmp_project.root / "agents" / "triage" / "local.txt").exists()


def test_add_from_a_folder_with_a_name(al, tmp_project, tmp_path):
    folder = tmp_path / "my-skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\ndescription: No name.\n---\nBody.\n")
    result = al("add", str(folder), "--name", "renamed", cwd=tmp_project.root)
    assert result.returncode == 0, result.stderr
    assert (tmp_project.root / "agents" / "renamed" / "SKILL.md").exists()
    assert al("add", str(folder), cwd=tmp_project.root).returncode == 0
    assert (tmp_project.root / "agents" / "my-skill" / "SKILL.md").exists()


@pytest.mark.parametrize(
    ("source", "code", "expected"),
    [
        # The clone failed (exit 1); the source named is wrong (exit 2).
        (
            "file:///nonexistent/repo.git",
            1,
            "error: git clone file:///nonexistent/repo.git failed: ",
        ),
        (
            "./no-such-dir",
            2,
            "error: ./no-such-dir: no such folder, and not a git URL or owner/repo",
        ),
        (".#../elsewhere", 2, "error: .#../elsewhere: the #path must stay inside the source"),
    ],
)
def test_add_failures_are_one_line(al, tmp_project, source, code, expected):
    result = al("add", source, cwd=tmp_project.root)
    no_traceback(result)
    assert result.returncode == code
    assert result.stderr.startswith(expected)
    assert len(result.stderr.splitlines()) == 1


def test_add_without_skill_md(al, tmp_project, tmp_path):
    (tmp_path / "empty").mkdir()
    result = al("add", str(tmp_path / "empty"), cwd=tmp_project.root)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'empty'}: no SKILL.md there (nor in skills/*/ or agents/*/)"
    )

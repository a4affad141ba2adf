"""Environments as Action Llama layers them, through the real ``al``: ``config.toml``, then
``.env.toml``, then the environment's file (``~/.action-llama/environments/NAME.toml``),
chosen by ``-E NAME``, else ``$AL_ENV``, else ``.env.toml``'s ``environment``. Each layer is
seen by what it changes: the script the scripted model replays (its ``script`` key)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject, imported_by


def script(value: str) -> str:
    return (
        f'[[turns]]\ntool_calls = [{{ name = "return_value", arguments = {{ value = "{value}" }} }}]\n'
        '[[turns]]\ntext = "done"\n'
    )


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    envs = tmp_path / "envs"
    project = OfflineProject(
        tmp_path / "proj", creds=tmp_path / "creds", env={"AL_ENVIRONMENTS_DIR": str(envs)}
    )
    if project.fakes:
        pytest.skip("needs the scripted provider (its script key)")
    project.add_scripted_agent("worker", script=script("config.toml"))
    for name in ("dotenv", "staging", "prod"):
        project.write(f"agents/worker/{name}.toml", script(name))
    envs.mkdir()
    for name in ("staging", "prod"):  # settings only: no [server], so commands act here
        (envs / f"{name}.toml").write_text(f'[models.scripted]\nscript = "{name}.toml"\n')
    return project


def returned(project: OfflineProject, *args: str, **env: str) -> str:
    result = project.al("run", "worker", *args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return re.search(r'return value: "(.*)"', result.stdout).group(1)


def test_each_layer_over_the_one_below(project):
    assert returned(project) == "config.toml"
    dotenv = project.root / ".env.toml"
    dotenv.write_text('# this machine only\n[models.scripted]\nscript = "dotenv.toml"\n')
    assert returned(project) == "dotenv"
    assert returned(project, "-E", "staging") == "staging"
    assert returned(project, "--env", "prod") == "prod"
    assert returned(project, AL_ENV="prod") == "prod"
    # Bound to an environment, as `al env set staging` (or Action Llama's) leaves .env.toml.
    dotenv.write_text('environment = "staging"\n' + dotenv.read_text())
    assert returned(project) == "staging"
    assert returned(project, AL_ENV="prod") == "prod"  # $AL_ENV over the binding
    assert returned(project, "-E", "prod", AL_ENV="staging") == "prod"  # -E over both


def test_a_scheduler_runs_with_the_environment_it_was_started_with(project):
    started = project.al("start", "--detach", "-E", "prod")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        assert returned(project) == "prod"  # queued on that scheduler, run with its layers
        status = json.loads(project.al("stat", "--json", "-E", "staging").stdout)
        assert [row["agent"] for row in status["agents"]] == ["worker"]
    finally:
        stopped = project.al("stop", "-E", "staging")  # staging has no server: the local one
    assert stopped.returncode == 0, stopped.stderr
    assert re.fullmatch(r"scheduler \d+ stopped\n", stopped.stdout)


def test_what_a_layer_gets_wrong_names_that_layer(project, tmp_path):
    dotenv = project.root / ".env.toml"
    dotenv.write_text("[gateway]\nprot = 1\n")
    bad = project.al("validate")
    assert bad.returncode != 0
    assert '.env.toml: gateway.prot: unknown key (did you mean "port"?)' in bad.stdout
    dotenv.write_text('environment = "staging"\n')
    (tmp_path / "envs" / "staging.toml").write_text('[models.scripted]\nscirpt = "x.toml"\n')
    bad = project.al("validate")
    assert f"{tmp_path}/envs/staging.toml: models.scripted.scirpt: unknown key" in bad.stdout
    cases = {
        ("run", "worker", "-E", "nope"): "error: --env nope: no environment 'nope' in "
        f"{tmp_path}/envs (known: prod, staging); create it with `al env init nope` or "
        "`al env add nope --host HOST`",
        ("run", "worker", "-E", "../etc"): "error: invalid environment name '../etc': expected "
        "lowercase letters, digits and '-' (not first or last), at most 50 characters",
    }
    for args, message in cases.items():
        result = project.al(*args)
        assert (result.returncode, result.stderr.strip()) == (2, message)
    dotenv.write_text("environment = 3\n")
    result = project.al("run", "worker")
    assert result.stderr.strip() == (
        "error: .env.toml: environment: expected an environment name (`al env list`), got 3"
    )


def test_reading_the_binding_costs_al_stat_no_project_load(project, scheduler, tmp_path):
    """Action Llama's projects carry a .env.toml: with a scheduler up, `al stat` still answers
    from its rows without importing the project's parsers."""
    (project.root / ".env.toml").write_text('projectName = "mine"\n')
    scheduler(project)
    # A cache of its own, written by a first `al`: without a valid command manifest every
    # command module and plugin loads (another worker's PYTHONPATH once made this one's stale).
    env = {**project.env, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    imported_by("--help", env=env)
    imported = imported_by("--project", str(project.root), "stat", "--json", env=env)
    assert "llamaherd.environments" in imported
    assert not {"llamaherd.project", "llamaherd.plugins", "yaml"} & imported


def test_al_validate_checks_the_project_as_an_environment_makes_it(project):
    """Issue 42 item 11: ``al validate -E NAME`` (and ``$AL_ENV``) validate the layered config:
    a bad value only the environment sets is found there, not without it."""
    envs = Path(project.env["AL_ENVIRONMENTS_DIR"])
    (envs / "broken.toml").write_text("[models.scripted]\nscript = 7\n")
    assert project.al("validate").returncode == 0
    for args, env in ((("-E", "broken"), {}), ((), {"AL_ENV": "broken"})):
        checked = project.al("validate", *args, env=env)
        assert checked.returncode == 2, checked.stdout + checked.stderr
        assert "models.scripted.script" in checked.stdout + checked.stderr
    assert project.al("validate", "-E", "staging").returncode == 0

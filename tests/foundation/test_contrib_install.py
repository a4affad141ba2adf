"""Third-party plugins installed for real with pip appear in `al plugins` and `al schema`."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from llamaherd.testing import pip_installed

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
EXAMPLES = {
    "llamaherd-example-trigger": CONTRIB / "example-trigger",
    "llamaherd-pager": CONTRIB / "pager",
}


@pytest.fixture
def installed_contrib():
    present = {dist: path for dist, path in EXAMPLES.items() if (path / "pyproject.toml").exists()}
    with ExitStack() as stack:
        for dist, path in present.items():
            stack.enter_context(pip_installed(path, dist))
        yield present


def test_contrib_plugins_appear_without_changing_core(installed_contrib, al, tmp_project):
    rows = {row["name"]: row for row in json.loads(al("plugins", "--json").stdout)}
    trigger = rows["example-trigger"]
    assert trigger["distribution"] == "llamaherd-example-trigger" and trigger["version"] == "0.1.0"
    assert trigger["registers"] == ["trigger-type:file_watch"]

    agent = json.loads(al("schema", "--agent").stdout)
    assert agent["properties"]["watch"]["required"] == ["paths"]
    assert "interval" in agent["properties"]["watch"]["properties"]
    if "llamaherd-pager" in installed_contrib:
        (credential_type,) = [
            item.removeprefix("credential-type:")
            for item in rows["pager"]["registers"]
            if item.startswith("credential-type:")
        ]
        assert credential_type in agent["properties"]["credentials"]["items"]["examples"]

    tmp_project.config('[models.m]\nprovider = "scripted"\nmodel = "scripted"\n')
    tmp_project.add_agent(
        "watcher",
        'models = ["m"]\n[watch]\npathz = ["/tmp/x"]\n[runtime]\ntype = "host-user"\nrun_as = "al-agent"\n',
    )
    result = al("validate", cwd=tmp_project.root)
    assert result.returncode == 2
    assert (
        'agents/watcher/config.toml: watch.pathz: unknown key (did you mean "paths"?)'
        in result.stdout
    )
    assert "agents/watcher/config.toml: watch.paths: missing (required)" in result.stdout

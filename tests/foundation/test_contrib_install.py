"""Third-party plugins, found as installed distributions, appear in `al plugins` and `al schema`
(CI installs each for real with pip in its own env: `tox -e plugin-<name>`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llamaherd.testing import source_distribution

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
EXAMPLES = {
    "llamaherd-example-trigger": CONTRIB / "example-trigger",
    "llamaherd-pager": CONTRIB / "pager",
}


@pytest.fixture
def installed_contrib(tmp_path):
    """The contrib distributions present, and the env under which ``al`` finds them."""
    present = {dist: path for dist, path in EXAMPLES.items() if (path / "pyproject.toml").exists()}
    paths = [
        source_distribution(tmp_path / f"site-{dist}", path)["PYTHONPATH"]
        for dist, path in present.items()
    ]
    return present, {"PYTHONPATH": os.pathsep.join(paths)}


def test_contrib_plugins_appear_without_changing_core(installed_contrib, al, tmp_project):
    installed_contrib, env = installed_contrib
    rows = {row["name"]: row for row in json.loads(al("plugins", "--json", env=env).stdout)}
    trigger = rows["example-trigger"]
    assert trigger["distribution"] == "llamaherd-example-trigger" and trigger["version"] == "0.1.0"
    assert trigger["registers"] == ["trigger-type:file_watch"]

    agent = json.loads(al("schema", "--agent", env=env).stdout)
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
    result = al("validate", cwd=tmp_project.root, env=env)
    assert result.returncode == 2
    assert (
        'agents/watcher/config.toml: watch.pathz: unknown key (did you mean "paths"?)'
        in result.stdout
    )
    assert "agents/watcher/config.toml: watch.paths: missing (required)" in result.stdout

"""Third-party plugins installed for real with pip appear in `al plugins` and `al schema`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
EXAMPLES = {
    "llamaherd-example-trigger": CONTRIB / "example-trigger",
    "llamaherd-sentry": CONTRIB / "sentry",
}


def pip(*args: str) -> None:
    # hatchling is in the dev venv: no build isolation, so no network and a fast build.
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=True,
        capture_output=True,
        timeout=180,
    )


@pytest.fixture
def installed_contrib():
    present = {dist: path for dist, path in EXAMPLES.items() if (path / "pyproject.toml").exists()}
    try:
        pip("install", "--no-deps", "--no-build-isolation", *map(str, present.values()))
        yield present
    finally:
        pip("uninstall", "-y", *present)


def test_contrib_plugins_appear_without_changing_core(installed_contrib, al, tmp_project):
    rows = {row["name"]: row for row in json.loads(al("plugins", "--json").stdout)}
    trigger = rows["example-trigger"]
    assert trigger["distribution"] == "llamaherd-example-trigger" and trigger["version"] == "0.1.0"
    assert trigger["registers"] == ["trigger-type:file_watch"]
    if "llamaherd-sentry" in installed_contrib:
        assert any(item.startswith("credential-type:") for item in rows["sentry"]["registers"])

    agent = json.loads(al("schema", "--agent").stdout)
    assert agent["properties"]["watch"]["required"] == ["paths"]
    assert "interval" in agent["properties"]["watch"]["properties"]

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

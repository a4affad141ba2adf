"""Fixtures of the operations tests (doctor, update, scheduler status, run events)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamaherd.testing import OfflineProject


@pytest.fixture
def project(tmp_path: Path) -> OfflineProject:
    """An offline project (scripted provider, host-user as the current user) with its own
    credential store."""
    from llamaherd.plugins import registry

    needed = {"providers": ("scripted",), "runtimes": ("host-user",)}
    for kind, names in needed.items():
        missing = [name for name in names if name not in getattr(registry(), kind)]
        if missing:
            pytest.skip(f"these tests need the {', '.join(missing)} plugins")
    return OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=60)


@pytest.fixture
def cron_project(project: OfflineProject) -> OfflineProject:
    """``project``, for a test of schedules (skipped without the llamaherd-cron plugin)."""
    from llamaherd.plugins import registry

    if "cron" not in registry().trigger_types:
        pytest.skip("needs the llamaherd-cron plugin")
    return project


def doctor(project: OfflineProject, *args: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    """``al doctor --json ARGS``: its exit code and report."""
    result = project.al("doctor", "--json", *args, **kw)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def findings(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["check"] == check]


def al_with_input(project: OfflineProject, *args: str, input: str) -> Any:
    """``al ARGS`` of ``project`` with ``input`` on its stdin (answers to prompts)."""
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "llamaherd", "--project", str(project.root), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **project.env},
    )

"""The README's test command on a machine without the system services (issue 42 item 19): a
test that needs one skips with one line naming it and the command that brings it up, the
summary counts the skips per service, and under ``AL_REQUIRE_SERVICES=1`` (CI) the same run
fails. A small selection of real tests, run by pytest in a subprocess, with the services made
absent: ``DOCKER_HOST`` at a dead socket, no ``AL_TEST_POSTGRES_URL``, Chromium and sshd looked
for where there are none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamaherd.testing_services import SERVICES, skip_reason

ROOT = Path(__file__).resolve().parents[2]
# One real test per service: each needs what its fixtures (or marker) say.
SELECTION = {
    "docker": "plugins/docker/tests/test_docker_sandbox.py::test_root_fs_is_read_only_and_only_tmp_is_writable",
    "postgres": "plugins/webhooks/tests/test_receipts.py::test_prune_removes_old_receipts_only",
    "browser": "plugins/dashboard/tests/test_browser.py::test_charts_have_axes_and_units",
    "sshd": "plugins/ssh/tests/test_ssh_sandbox.py::test_output_is_streamed_by_line",
}  # fmt: skip


def run_selection(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    missing = tmp_path / "missing"
    bare = {k: v for k, v in os.environ.items() if k not in ("AL_TEST_POSTGRES_URL", "CI")}
    bare.pop("AL_REQUIRE_SERVICES", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-q", *SELECTION.values()],
        cwd=ROOT,
        env={
            **bare,
            "DOCKER_HOST": f"unix://{missing}/docker.sock",
            "AL_TEST_CHROMIUM": str(missing / "chromium"),
            "AL_TEST_SSHD": str(missing / "sshd"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip


def test_without_the_services_the_run_passes_and_says_what_it_skipped(tmp_path: Path) -> None:
    for path in SELECTION.values():
        if not (ROOT / path.split("::")[0]).exists():
            pytest.skip(f"{path} is not in this checkout")
    done = run_selection(tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # 5 tests: the receipts test runs on SQLite and is skipped on PostgreSQL.
    assert re.search(r"\b1 passed, 4 skipped\b", out), out
    summary = out[out.index("tests skipped for want of a system service") :]
    for name in SELECTION:
        service = SERVICES[name]
        assert f"1 skipped: {service.label} (" in summary, (name, summary)
        assert service.bring_up in summary
    assert "AL_REQUIRE_SERVICES=1 makes each such skip a failure" in summary
    assert skip_reason("postgres", "AL_TEST_POSTGRES_URL is not set") in summary.replace(
        "1 skipped: ", "needs "
    )


def test_with_the_ci_switch_the_same_run_fails(tmp_path: Path) -> None:
    done = run_selection(tmp_path, AL_REQUIRE_SERVICES="1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert re.search(r"\b4 (failed|errors?)\b", out), out
    for name in SELECTION:
        assert f"needs {SERVICES[name].label} (" in out, name
    assert "AL_REQUIRE_SERVICES is set: a missing service fails" in out


def test_the_readme_lists_every_service_and_how_to_bring_it_up() -> None:
    readme = (ROOT / "README.md").read_text().replace("\\|", "|")
    rows = [line for line in readme.splitlines() if line.startswith("| ")]
    for service in SERVICES.values():
        assert any(
            line.startswith(f"| {service.label} |") and service.bring_up in line for line in rows
        ), service.label
    assert "AL_REQUIRE_SERVICES=1" in readme
    assert "export AL_REQUIRE_SERVICES=1" in (ROOT / ".ci" / "run").read_text()

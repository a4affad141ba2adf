"""A scheduler's orphan sweep takes only its own runs base's cgroups: a run of a scheduler that
sees another /tmp (a systemd PrivateTmp, a container sharing the cgroup tree) keeps running,
while a stray of its own base (its private area gone) is removed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from llamaherd_host_user.containment import CGROUP_PARENT, CgroupContainment, cgroup2_mount
from llamaherd_host_user.layout import base_scope, runs_base

from llamaherd.testing import OfflineProject, require_service, service_unavailable, wait_until


@pytest.fixture
def parent() -> Path:
    require_service("root")
    mount = cgroup2_mount()
    if mount is None:
        service_unavailable("cgroup2", "no cgroup2 hierarchy is mounted")
    return mount / CGROUP_PARENT


def contained(cgroup: Path) -> subprocess.Popen:
    """A process living in ``cgroup`` (made here), as a run's would."""
    cgroup.mkdir(parents=True)
    process = subprocess.Popen(["sleep", "300"])
    (cgroup / "cgroup.procs").write_text(str(process.pid))
    return process


def test_the_orphan_sweep_leaves_another_tmps_runs_alone(tmp_path, parent, scheduler):
    theirs = parent / "base-ffffffff-1" / f"other-{os.getpid()}"  # no base of ours has this scope
    ours = parent / base_scope(runs_base()) / f"stray-{os.getpid()}"
    other, stray = contained(theirs), contained(ours)
    try:
        project = OfflineProject(tmp_path / "proj")
        project.add_scripted_agent("worker")
        scheduler(project)  # its start sweeps what no live run of its own owns
        wait_until(lambda: not ours.exists(), 15, what="our own stray cgroup removed")
        assert stray.wait(10) is not None, "the stray's process was killed with it"
        assert theirs.is_dir() and other.poll() is None, "another /tmp's run kept"
    finally:
        for process in (other, stray):
            process.kill()
            process.wait(10)
        CgroupContainment(theirs.parent).remove()
        CgroupContainment(ours).remove()

"""Runtime-level behaviour: orphan cleanup after a scheduler kill -9, a missing daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from llamaherd.types import SandboxError

pytestmark = pytest.mark.docker

TESTS = Path(__file__).parent

# A stand-in scheduler: starts a sandbox for a run, reports its handle, then hangs until killed.
SCHEDULER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from conftest import make_spec
    from llamaherd.testing import TmpProject
    from llamaherd_docker.runtime import ContainerRuntime

    spec = make_spec(TmpProject(Path(sys.argv[2])), Path(sys.argv[3]), run_id=sys.argv[4],
                     credentials={"token/default": {"token": "x"}})
    print(json.dumps(ContainerRuntime().start(spec).handle()), flush=True)
    time.sleep(600)
    """
)


def _scheduler_sandbox(project: Any, bin_dir: Path, run_id: str) -> dict[str, Any]:
    """Start a sandbox from a child process, then kill -9 that process."""
    child = subprocess.Popen(
        [sys.executable, "-c", SCHEDULER, str(TESTS), str(project.root), str(bin_dir), run_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        handle = json.loads(child.stdout.readline())  # type: ignore[union-attr]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    return handle


def test_orphans_of_a_killed_scheduler_are_removed(
    project: Any, bin_dir: Path, runtime: Any, start: Any, docker_client: Any
) -> None:
    from llamaherd_docker.runtime import ContainerRuntime

    orphan = _scheduler_sandbox(project, bin_dir, "worker-orphan")
    adopted = _scheduler_sandbox(project, bin_dir, "worker-still-live")
    mine = start()  # started by this (live) process: never an orphan
    fresh = ContainerRuntime()  # the restarted scheduler
    assert fresh.cleanup_orphans({"worker-still-live"}) == 1
    ids = {c.id for c in docker_client.containers.list(all=True)}
    assert orphan["container"] not in ids and not Path(orphan["credentials_dir"]).exists()
    assert adopted["container"] in ids and mine.id in ids
    # Scoped to a project, the live set alone decides.
    assert fresh.cleanup_orphans({mine.handle()["container"]}, project=project.load()) == 2
    assert {adopted["container"], mine.id}.isdisjoint(c.id for c in docker_client.containers.list(all=True))


def test_missing_daemon_is_one_clear_error(
    project: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from llamaherd_docker.runtime import ContainerRuntime

    dead = f"unix://{tmp_path}/no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    expected = (
        f"Docker daemon not reachable at {dead}: "
        'start dockerd or use [runtime] type = "host-user"'
    )
    runtime = ContainerRuntime()
    loaded = project.load()
    with pytest.raises(SandboxError) as failed:
        runtime.prepare(loaded.agent("worker"), loaded)
    assert str(failed.value) == expected
    assert runtime.validate(loaded.agent("worker"), loaded) == [expected]
    assert runtime.cleanup_orphans(set()) == 0  # no daemon: nothing of ours can be running

    from conftest import AL

    done = subprocess.run(
        [str(AL), "setup", "docker"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr == f"error: {expected}\n"

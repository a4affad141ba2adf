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

from llamaherd.api import SandboxError

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


def _killed_schedulers(bin_dir: Path, *runs: tuple[Any, str]) -> list[dict[str, Any]]:
    """Start one sandbox per (project, run id), each from its own child process (all at once),
    then kill -9 those processes. Returns the sandboxes' handles."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", SCHEDULER, str(TESTS), str(project.root), str(bin_dir), run],
            stdout=subprocess.PIPE,
            text=True,
        )
        for project, run in runs
    ]
    try:
        return [json.loads(child.stdout.readline()) for child in children]  # type: ignore[union-attr]
    finally:
        for child in children:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)


def test_orphans_of_a_killed_scheduler_are_removed(
    project: Any, tmp_path: Path, bin_dir: Path, start: Any, docker_client: Any
) -> None:
    from llamaherd_docker.runtime import ContainerRuntime

    from llamaherd.testing import TmpProject

    other = TmpProject(tmp_path / "other")
    other.add_agent("worker", "")
    orphan, adopted, elsewhere = _killed_schedulers(
        bin_dir,
        (project, "worker-orphan"),
        (project, "worker-adopted"),
        (other, "worker-elsewhere"),
    )
    mine = start(run_id="worker-mine")

    def present() -> set[str]:
        return {c.id for c in docker_client.containers.list(all=True)}

    fresh = ContainerRuntime()  # the restarted scheduler
    loaded = project.load()
    assert fresh.cleanup_orphans(set()) == 0  # knows no project yet: touches nothing
    assert fresh.cleanup_orphans({"worker-adopted", "worker-mine"}, project=loaded) == 1
    assert orphan["container"] not in present()
    assert not Path(orphan["credentials_dir"]).exists()
    assert {adopted["container"], elsewhere["container"], mine.id} <= present()

    assert fresh.validate(loaded.agent("worker"), loaded) == []  # as a scheduler does on start
    assert fresh.cleanup_orphans({"worker-mine"}) == 1
    assert adopted["container"] not in present()
    assert {elsewhere["container"], mine.id} <= present()  # another project's; a live run's
    assert fresh.cleanup_orphans(set(), project=other.load()) == 1
    assert not Path(elsewhere["credentials_dir"]).exists()


def test_missing_daemon_is_one_clear_error(
    project: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, al: Any
) -> None:
    from llamaherd_docker.runtime import ContainerRuntime

    dead = f"unix://{tmp_path}/no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", dead)
    expected = (
        f'Docker daemon not reachable at {dead}: start dockerd or use [runtime] type = "host-user"'
    )
    runtime = ContainerRuntime()
    loaded = project.load()
    with pytest.raises(SandboxError) as failed:
        runtime.prepare(loaded.agent("worker"), loaded)
    assert str(failed.value) == expected
    assert runtime.validate(loaded.agent("worker"), loaded) == [f"warning: {expected}"]
    assert runtime.cleanup_orphans(set()) == 0  # no daemon: nothing of ours can be running

    done = al("setup", "docker")
    assert done.returncode == 1  # no daemon: an operation failure
    assert done.stderr == f"error: {expected}\n"


class CountingProxy:
    """A unix socket in front of the real daemon's that counts the image inspections
    (``GET .../images/<name>/json``) passing through it."""

    def __init__(self, path: Path, daemon: str) -> None:
        import socket
        import threading

        self.daemon = daemon
        self.inspections = 0
        self._lock = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        self.url = f"unix://{path}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.daemon)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: Any, sink: Any, requests: bool) -> None:
        import re

        try:
            while data := source.recv(65536):
                if requests:
                    with self._lock:
                        self.inspections += len(re.findall(rb"GET [^ ]*/images/[^ ]*/json ", data))
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()

    def close(self) -> None:
        self.server.close()


def test_validating_many_agents_asks_the_daemon_once_per_image(
    tmp_project: Any, base_image: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A scheduler validates every agent at its start: 40 agents on one base image are one
    inspection of that image, not 40 round trips to the daemon."""
    from llamaherd_docker.runtime import ContainerRuntime

    tmp_project.config(f'[local]\nimage = "{base_image}"\n')
    for i in range(40):
        tmp_project.add_agent(f"agent-{i:02d}")
    daemon = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    proxy = CountingProxy(tmp_path / "docker.sock", daemon)
    monkeypatch.setenv("DOCKER_HOST", proxy.url)
    try:
        loaded = tmp_project.load()
        runtime = ContainerRuntime()
        found = [runtime.validate(agent, loaded) for agent in loaded.agents.values()]
        assert found == [[]] * 40  # the base image is there
        assert proxy.inspections == 1
        # A project loaded again (a live reload) is judged afresh: the image may be gone.
        again = tmp_project.load()
        runtime.validate(again.agent("agent-00"), again)
        assert proxy.inspections == 2
    finally:
        proxy.close()

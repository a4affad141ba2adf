"""Host pools against real sshd servers: two servers (one user each) as two hosts with
capacity 1, queued runs placed on the least-loaded reachable host, never more than one at a
time on a host (seen from the hosts themselves), a host that goes down skipped and its run
requeued, and the capacities held by two schedulers sharing PostgreSQL."""

from __future__ import annotations

import importlib.util
import os

import pytest
import tomli_w
from llamaherd_ssh.settings import Settings

from llamaherd.testing import OfflineProject, postgres_schema, wait_until

# Each run notes on its host when it began and ended (in the login user's home, outside the
# run's dir): the hosts' own record of how many runs they held at once.
SCRIPT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
echo "begin $(date +%s.%N) $AL_RUN_ID" >> "$HOME/pool.log"
sleep 1.5
echo "end $(date +%s.%N) $AL_RUN_ID" >> "$HOME/pool.log"
'''}}]

[[turns]]
text = "done"
"""


def pool_project(root, users, database: str | None = None) -> OfflineProject:
    settings = f'database = "{database}"\n' if database else ""
    project = OfflineProject(root, settings)
    hosts = [
        {k: v for k, v in user.runtime().items() if k != "type"} | {"capacity": 1} for user in users
    ]
    config = {"models": ["scripted"], "scale": 4, "runtime": {"type": "ssh", "hosts": hosts}}
    project.add_agent("worker", tomli_w.dumps(config))
    project.write("agents/worker/script.toml", SCRIPT)
    return project


def intervals(user) -> list[tuple[float, float, str]]:
    """(begin, end, run id) of each run the host's log records as finished."""
    path = user.home / "pool.log"
    if not path.exists():
        return []
    begun, done = {}, []
    for line in path.read_text().splitlines():
        kind, at, run = line.split()
        if kind == "begin":
            begun[run] = float(at)
        elif run in begun:
            done.append((begun.pop(run), float(at), run))
    return sorted(done)


def never_overlap(spans: list[tuple[float, float, str]]) -> None:
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        assert end <= begin, f"{first} and {second} ran at once on one host"


@pytest.fixture
def two_hosts(ssh_server, ssh_user):
    return [ssh_user(ssh_server()), ssh_user(ssh_server())]


def queue(project: OfflineProject, count: int) -> None:
    """``count`` manual runs of ``worker`` queued at once (before a scheduler takes them)."""
    store = project.store()
    try:
        for _ in range(count):
            store.enqueue("worker", "manual", {})
    finally:
        store.close()


def test_runs_fill_each_host_up_to_its_capacity(tmp_path, two_hosts, scheduler) -> None:
    project = pool_project(tmp_path / "project", two_hosts)
    queue(project, 4)
    started = scheduler(project)
    runs = project.wait_run(
        lambda runs: len(runs) == 4 and all(r.state == "done" for r in runs) and runs, 120
    )
    for user in two_hosts:
        spans = intervals(user)
        assert len(spans) == 2, started.read_log()  # least-loaded first: two runs each
        never_overlap(spans)
    assert {r.id for r in runs} == {s[2] for u in two_hosts for s in intervals(u)}
    for user in two_hosts:  # each sandbox is removed just after its run's end is recorded
        wait_until(lambda user=user: user.files(".al-runs") == [], 15, what="no files left")


def test_a_host_that_goes_down_is_skipped_and_its_run_requeued(
    tmp_path, two_hosts, scheduler
) -> None:
    down, up = two_hosts
    project = pool_project(tmp_path / "project", two_hosts)
    queue(project, 4)
    started = scheduler(project)
    wait_until(lambda: (down.home / "pool.log").exists(), 60, what="a run on the first host")
    down.server.stop()  # the host goes down mid-run: its run is lost with it
    runs = project.wait_run(lambda runs: sum(r.state == "done" for r in runs) == 4 and runs, 180)
    lost = [r for r in runs if r.state == "error"]
    assert len(lost) == 1 and lost[0].reason.startswith("interrupted: ssh "), lost
    assert len(intervals(up)) == 4  # every trigger ran to its end on the host left
    never_overlap(intervals(up))
    assert not intervals(down)  # the run there never finished
    stat = project.al("stat").stdout
    assert f"{down.name}@127.0.0.1:{down.server.port}: down since" in stat, stat
    assert "unreachable: connect to host 127.0.0.1" in stat
    if importlib.util.find_spec("llamaherd_dashboard"):  # not in `tox -e plugin-ssh`
        page = started.get("/agents/worker")
        assert page.status_code == 200 and "down since" in page.text, page.text[:500]
    doctor = project.al("doctor").stdout
    assert f"ssh host {down.name}@127.0.0.1:{down.server.port}" in doctor
    assert "unreachable" in doctor, started.read_log()


@pytest.mark.postgres
def test_two_schedulers_on_postgresql_respect_the_capacities(
    tmp_path, two_hosts, scheduler
) -> None:
    with postgres_schema(os.environ["AL_TEST_POSTGRES_URL"]) as (_, url):
        first = pool_project(tmp_path / "one", two_hosts, url)
        second = pool_project(tmp_path / "two", two_hosts, url)
        schedulers = [scheduler(first), scheduler(second)]
        queue(first, 6)  # both are up: both claim, and race for the hosts' slots
        first.wait_run(
            lambda runs: len(runs) == 6 and all(r.state == "done" for r in runs) and runs, 180
        )
        for user in two_hosts:
            never_overlap(intervals(user))
        assert sum(len(intervals(u)) for u in two_hosts) == 6
        # Which scheduler placed how many is a race (one that finds every host full holds its
        # claims by the admission check and logs nothing): only the capacities are asserted.
        assert all(started.proc.poll() is None for started in schedulers)


def test_a_run_held_while_every_host_was_down_starts_when_the_retry_window_ends(
    tmp_path, ssh_server, ssh_user, scheduler
) -> None:
    """On the real clock, with nothing else to wake the scheduler: the run waits for the 30 s
    a host that failed is passed over, then starts at once (not at a later pass)."""
    from llamaherd_ssh.pool import Pool

    host = ssh_user(ssh_server())
    project = pool_project(tmp_path / "project", [host])
    [target] = Settings.of(project.load().agent("worker")).hosts
    host.server.stop()
    queue(project, 1)
    scheduler(project)
    store = project.store()
    try:
        retry_at = wait_until(
            lambda: Pool(store).down([target]).get(target.key), 60, what="the host found down"
        )
    finally:
        store.close()
    host.server.start()
    [run] = project.wait_run(lambda runs: runs or None, 60)
    assert retry_at - 0.05 <= run.created_at <= retry_at + 1.0, run.created_at - retry_at

"""A database on a full disk or made read-only: one clear error line, nothing acknowledged lost.

The disk-full database lives on a real 2 MiB tmpfs (root only); a filler file takes the rest of
the space. The read-only database is made immutable with ``chattr +i`` (root ignores mode bits).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamaherd.testing import OfflineProject, wait_until

QUICK = """
[[turns]]
text = "done"
"""
SECRET = "disk-secret"

pytestmark = pytest.mark.root  # mounts a tmpfs and uses chattr


@contextlib.contextmanager
def tiny_filesystem(path: Path, size: str = "2m") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def ballast(directory: Path, size: int) -> Path:
    """A file taking ``size`` bytes of ``directory``'s filesystem (deleted to free space)."""
    path = directory / "ballast"
    path.write_bytes(b"\0" * size)
    return path


def fill(directory: Path) -> None:
    """Take every byte still free on ``directory``'s filesystem."""
    with contextlib.suppress(OSError), open(directory / "filler", "wb") as out:
        for size in (65536, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
                    out.flush()


def one_clear_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


def project_on(tmp_path: Path, db: Path, webhooks: bool = True) -> OfflineProject:
    settings = f'database = "sqlite:///{db}"\nworkQueueSize = 1000\n'
    if webhooks:
        settings += '\n[webhooks.signed]\ntype = "generic"\ncredential = "disk"\n'
    project = OfflineProject(tmp_path / "proj", settings)
    project.add_scripted_agent("quick", "", QUICK)
    if webhooks:
        with open(project.root / "agents" / "quick" / "config.toml", "a") as config:
            config.write('\n[[webhooks]]\nsource = "signed"\n')
    return project


def signed(sched, n: int):
    body = json.dumps({"n": n}).encode()
    headers = {
        "X-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
        "X-Delivery-Id": f"disk-{n}",
    }
    return sched.http.post(f"{sched.url}/webhooks/signed", data=body, headers=headers, timeout=30)


def queued_numbers(project: OfflineProject) -> list[int]:
    store = project.store()
    try:
        numbers = []
        for kind in ("manual", "webhook"):
            rows = store._db.execute_sql(
                "SELECT payload FROM work_items WHERE state = 'queued' AND kind = ?", (kind,)
            ).fetchall()
            for (payload,) in rows:
                data = json.loads(payload)
                numbers.append(data["n"] if kind == "manual" else data["payload"]["n"])
        return sorted(numbers)
    finally:
        store.close()


def post(sched, n: int):
    """A manual run (odd n) or a signed webhook (even n), padded so the disk fills sooner."""
    if n % 2:
        return sched.post(
            "/control/run", {"agent": "quick", "payload": {"n": n, "pad": "x" * 1500}}
        )
    return signed(sched, n)


def test_disk_full_gives_a_clear_error_and_keeps_what_was_acknowledged(tmp_path, scheduler):
    with tiny_filesystem(tmp_path / "tiny") as tiny:
        reserve = ballast(tiny, 1024 * 1024)
        project = project_on(tmp_path, tiny / "work-queue.db")
        env = {"AL_CREDENTIALS_DIR": str(tmp_path / "credentials")}
        project.al("creds", "add", "webhook_secret:disk", "--from-env", "secret=S",
                   env={**env, "S": SECRET}, check=True)  # fmt: skip
        sched = scheduler(project, env)
        project.al("pause", check=True)
        acked, errors, failed = [], [], []
        for n in range(3000):  # until the database can grow no more
            response = post(sched, n)
            if response.status_code in (200, 202):
                acked.append(n)
                continue
            assert response.status_code in (400, 503), (response.status_code, response.text)
            errors.append(response.json()["error"])
            failed.append(n)
            if len(errors) >= 6:
                break
        assert errors, "the disk never filled up"
        assert len(acked) > 20, "the database should take some items first"
        log = sched.read_log()
        for n in failed:  # refused (503) deliveries are logged as such, never as queued
            assert not any(
                f"delivery disk-{n} " in line and "queued for" in line for line in log.splitlines()
            ), n
        for error in errors:
            assert "Traceback" not in error and "\n" not in error.strip(), error
        fill(tiny)  # whatever a failed write left free
        # A long prompt: a failed commit leaves its WAL frames allocated, and a smaller write
        # may still fit in them.
        cli = project.al("run", "quick", "x" * 100_000, "--no-follow", env=env)

        reserve.unlink()  # space is back: the same scheduler takes work again
        (tiny / "filler").unlink()
        # Senders retry refused webhooks: a delivery whose item was committed before its
        # receipt failed must not be queued twice.
        retried = [n for n in failed if n % 2 == 0]
        for n in [*retried, 1_000_001, 1_000_002]:
            assert post(sched, n).status_code in (200, 202)
        acked += [*retried, 1_000_001, 1_000_002]
        assert sched.stop() == 0, sched.read_log()[-2000:]
        assert queued_numbers(project) == sorted(acked), "acknowledged items queued, once each"
        print(f"[reliability] disk full after {len(acked)} acknowledged items: {errors[:2]}")
        assert any("disk is full" in error for error in errors), "\n".join(errors)
        assert cli.returncode != 0, cli.stdout
        line = one_clear_line(cli.stderr)
        assert "disk is full" in line and "work-queue.db" in line, line


def test_disk_full_before_the_first_write_in_the_foreground(tmp_path):
    with tiny_filesystem(tmp_path / "tiny") as tiny:
        project = project_on(tmp_path, tiny / "work-queue.db", webhooks=False)
        fill(tiny)
        result = project.al("run", "quick")
        assert result.returncode != 0
        line = one_clear_line(result.stderr)
        assert "disk is full" in line and "work-queue.db" in line, line
        (tiny / "filler").unlink()
        assert project.al("run", "quick").returncode == 0


@contextlib.contextmanager
def immutable(*paths: Path) -> Iterator[None]:
    existing = [str(p) for p in paths if p.exists()]
    subprocess.run(["chattr", "+i", *existing], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *existing], check=False)


def test_read_only_database_gives_a_clear_error_and_loses_nothing(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", "workQueueSize = 1000\n")
    project.add_scripted_agent("quick", "", QUICK)
    sched = scheduler(project)
    project.al("pause", check=True)
    for n in range(20):
        assert (
            sched.post("/control/run", {"agent": "quick", "payload": {"n": n}}).status_code == 202
        )
    assert sched.stop() == 0
    db = project.root / ".al" / "work-queue.db"
    wal, shm = (db.with_name(db.name + suffix) for suffix in ("-wal", "-shm"))
    with immutable(db, wal, shm, db.parent):
        for args in (("run", "quick"), ("run", "quick", "--no-follow"), ("start",)):
            result = project.al(*args, timeout=60)
            assert result.returncode != 0, (args, result.stdout)
            line = one_clear_line(result.stderr)
            assert "work-queue.db" in line, (args, line)
    assert queued_numbers(project) == list(range(20))


def test_database_made_read_only_under_a_running_scheduler(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", "workQueueSize = 1000\n")
    project.add_scripted_agent("quick", "", QUICK)
    sched = scheduler(project)
    project.al("pause", check=True)
    for n in range(20):
        assert (
            sched.post("/control/run", {"agent": "quick", "payload": {"n": n}}).status_code == 202
        )
    db = project.root / ".al" / "work-queue.db"
    wal = db.with_name(db.name + "-wal")
    # Not the -shm: SQLite maps it, and once its pages are written back, the kernel answers
    # the next store into the mapping of an immutable file with SIGBUS (ext4's page_mkwrite),
    # which kills any SQLite process (plain `sqlite3` too); the database and its WAL refusing
    # writes is what a read-only database is to the store.
    with immutable(db, wal, db.parent):
        response = sched.post("/control/run", {"agent": "quick", "payload": {"n": 20}})
        assert response.status_code in (400, 503), response.text
        assert "work-queue.db" in response.json()["error"]
        assert sched.get("/control/health").status_code == 200
    assert sched.stop() == 0, sched.read_log()[-2000:]
    assert queued_numbers(project) == list(range(20))


SLOW_TURNS = """
[[turns]]
repeat = 12
tool_calls = [{name = "bash", arguments = {command = "head -c 2000 /dev/zero | tr '\\\\0' y; sleep 0.3"}}]
[[turns]]
text = "done"
"""


def test_disk_full_in_the_middle_of_a_run_does_not_leave_it_running(tmp_path, scheduler):
    """Checkpoints fail while the disk is full: the run must still end (in any final state)
    once space is back, not stay ``running`` with no thread behind it; the scheduler goes on."""
    with tiny_filesystem(tmp_path / "tiny", size="8m") as tiny:  # room for a WAL checkpoint after
        project = project_on(tmp_path, tiny / "work-queue.db", webhooks=False)
        project.add_scripted_agent("chatty", "timeout = 60\n", SLOW_TURNS)
        sched = scheduler(project)
        store = project.store()
        assert sched.post("/control/run", {"agent": "chatty"}).status_code == 202
        wait_for(lambda: store.runs(agent="chatty", states=("running",), limit=1), 30)
        fill(tiny)
        time.sleep(2.5)  # several checkpoints fail meanwhile
        (tiny / "filler").unlink()
        run = wait_for(
            lambda: next(
                (r for r in store.runs(agent="chatty", limit=1) if r.state != "running"), None
            ),
            30,
        )
        print(f"[reliability] run after a full disk: {run.state} ({run.reason})")
        assert sched.post("/control/run", {"agent": "quick"}).status_code == 202
        wait_for(lambda: [r for r in store.runs(agent="quick", limit=1) if r.state == "done"], 30)


def wait_for(predicate, timeout: float):
    # The store may fail while the disk is full.
    return wait_until(predicate, timeout, interval=0.1, ignore=(Exception,))


# The run's side effect (a line appended outside its sandbox), then a wait for the test's "go",
# then output big enough that recording it needs new database pages.
SIDE_EFFECT = """
[[turns]]
tool_calls = [{name = "bash", arguments = {command = '''
echo once >> %(effects)s; while [ ! -e %(go)s ]; do sleep 0.05; done; head -c 30000 /dev/zero | tr '\\\\0' y
'''}}]

[[turns]]
text = "done"
"""


def queued_items(project: OfflineProject) -> int:
    store = project.store()
    try:
        sql = "SELECT count(*) FROM work_items WHERE state = 'queued'"
        return store._db.execute_sql(sql).fetchone()[0]
    finally:
        store.close()


def test_disk_full_during_a_run_keeps_the_run_and_records_it_later(tmp_path, scheduler):
    """A run that cannot record its progress (the disk filled while a tool ran) is not a run
    whose scheduler died: it waits, records once space is back and ends done, and its side
    effect happens once (not again in an "interrupted" rerun)."""
    effects, go = tmp_path / "effects", tmp_path / "go"
    with tiny_filesystem(tmp_path / "tiny", "4m") as tiny:
        project = project_on(tmp_path, tiny / "work-queue.db", webhooks=False)
        project.add_scripted_agent("effect", "", SIDE_EFFECT % {"effects": effects, "go": go})
        sched = scheduler(project)
        assert project.al("run", "effect", "--no-follow").returncode == 0
        wait_until(effects.exists, 30, what="the side effect")
        fill(tiny)
        go.touch()  # the tool call ends; its output cannot be recorded now
        failed = ("could not record", "crashed")  # (the second: as it was before the fix)
        wait_until(lambda: any(w in sched.read_log() for w in failed), 30, what="a failed write")
        (tiny / "filler").unlink()
        # Until it ended, and nothing is queued for it any more (no rerun pending).
        project.wait_run(
            lambda runs: (
                all(r.state not in ("running", "waiting") for r in runs)
                and not queued_items(project)
            ),
            60,
        )
        assert sched.stop() == 0, sched.read_log()[-2000:]
        runs = project.wait_run(lambda runs: [r for r in runs if r.agent == "effect"])
        assert [(r.state, r.reason) for r in runs] == [("done", None)], sched.read_log()[-3000:]
        assert effects.read_text() == "once\n"

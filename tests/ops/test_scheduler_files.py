"""The scheduler's own files: `scheduler.log` is rotated by size (or left to logrotate) and
records the scheduler's stop; old runs are pruned on a timer (`historyRetentionDays`) and
`al stat` shows the database's size."""

from __future__ import annotations

import json
import os
import stat

from llamaherd.testing import OfflineProject, wait_until

DAY = 86400.0


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_log_is_rotated_by_size_and_a_detached_scheduler_follows(tmp_path):
    project = OfflineProject(
        tmp_path / "proj",
        '[log]\nlevel = "debug"\nmaxBytes = 300\nbackups = 2\n',
        creds=tmp_path / "creds",
    )
    project.add_scripted_agent("chatty")
    state = project.root / ".al"
    project.al("start", "--detach", check=True)
    try:
        pid = json.loads((state / "scheduler.json").read_text())["pid"]

        def rotated_twice() -> bool:
            project.al("run", "chatty", check=True)  # a few lines more each time
            return (state / "scheduler.log.2").exists()

        wait_until(rotated_twice, 120, what="two rotations")
        # Its stdout and stderr (a stray print, a crash's traceback) follow to the new file.
        for fd in (1, 2):
            assert os.readlink(f"/proc/{pid}/fd/{fd}") == str(state / "scheduler.log")
    finally:
        project.al("stop", check=True)
    logs = sorted(p.name for p in state.glob("scheduler.log*"))
    assert logs == ["scheduler.log", "scheduler.log.1", "scheduler.log.2"]  # 2 backups kept
    assert all(_mode(state / name) == 0o600 for name in logs)
    assert (state / "scheduler.log.1").stat().st_size <= 300 + 400  # one line may go past
    assert "stopped" in (state / "scheduler.log").read_text().splitlines()[-1]


def test_with_max_bytes_0_a_log_moved_away_by_logrotate_is_reopened(tmp_path, scheduler):
    project = OfflineProject(tmp_path / "proj", "[log]\nmaxBytes = 0\n", creds=tmp_path / "creds")
    project.add_scripted_agent("chatty")
    log = project.root / ".al" / "scheduler.log"
    running = scheduler(project)
    wait_until(lambda: "listening on" in log.read_text(), 30, what="the first lines")
    log.rename(log.with_name("scheduler.log.old"))  # what logrotate does
    project.al("run", "chatty", check=True)
    wait_until(lambda: log.exists() and "chatty" in log.read_text(), 30, what="a new file")
    assert _mode(log) == 0o600
    running.stop()
    assert "stopped" in log.read_text().splitlines()[-1]
    assert not list(project.root.joinpath(".al").glob("scheduler.log.[0-9]"))


def test_old_runs_are_pruned_on_a_timer_and_stat_shows_the_database(tmp_path, scheduler):
    clock = tmp_path / "clock"
    start = 1_900_000_000.0
    clock.write_text(str(start))
    project = OfflineProject(
        tmp_path / "proj",
        "historyRetentionDays = 3\n",
        creds=tmp_path / "creds",
        env={"AL_FAKE_CLOCK_FILE": str(clock)},
    )
    project.add_scripted_agent("old")
    running = scheduler(project)
    project.al("run", "old", check=True)
    assert len(json.loads(project.al("runs", "--json", check=True).stdout)) == 1
    database = json.loads(project.al("stat", "--json", check=True).stdout)["database"]
    assert database["bytes"] > 0 and database["retention_days"] == 3
    assert database["where"].endswith("work-queue.db")
    shown = project.al("stat", check=True).stdout.splitlines()
    assert any(line.startswith("database ") and "KiB (runs kept 3 days)" in line for line in shown)

    clock.write_text(str(start + 2 * DAY))  # two days on: still kept
    project.al("run", "old", check=True)
    clock.write_text(str(start + 4 * DAY))  # the first run is 4 days old, the second 2
    wait_until(
        lambda: len(json.loads(project.al("runs", "--json", check=True).stdout)) == 1,
        30,
        what="the old run pruned",
    )
    assert "older than 3 days (historyRetentionDays)" in running.read_log()

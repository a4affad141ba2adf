"""The cron trigger with a real Engine and Store and a fake clock (AL_FAKE_CLOCK_FILE)."""

from __future__ import annotations

import math
import os
import time
from datetime import UTC, datetime

import pytest
from llamaherd_cron.trigger import CronTrigger, Plan, parse_timezone

from llamaherd.api import ConfigError
from llamaherd.testing import wait_until

T0 = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC).timestamp()  # a Monday, 12:00:30 UTC


def at(hour: int, minute: int, second: float = 0.0) -> float:
    return datetime(2026, 1, 5, hour, minute, tzinfo=UTC).timestamp() + second


class Clock:
    """The fake clock file the engine reads."""

    def __init__(self, path):
        self.path = path

    def set(self, value: float) -> None:
        # Atomically: a reader must never see a half-written file (it would fall back to the
        # real time).
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(repr(value))
        os.replace(tmp, self.path)


@pytest.fixture
def clock(tmp_path, monkeypatch) -> Clock:
    fake = Clock(tmp_path / "clock")
    fake.set(T0)
    monkeypatch.setenv("AL_FAKE_CLOCK_FILE", str(fake.path))
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    return fake


@pytest.fixture
def project(tmp_project):
    tmp_project.config("")
    tmp_project.add_agent("every5", 'schedule = "*/5 * * * *"\ntimezone = "UTC"\n')
    tmp_project.add_agent(
        "nocatch", 'schedule = "*/5 * * * *"\ntimezone = "UTC"\ncatchUp = false\n'
    )
    tmp_project.add_agent("manual", "")
    return tmp_project


class Scheduler:
    """One scheduler 'process': a CronTrigger started on a real Engine, as `al start` does."""

    def __init__(self, started):
        self.started = started
        self.engine = started.engine

    @property
    def fired(self) -> list[tuple[str, float, bool]]:
        return [(e.agent, e.payload["tick"], c) for e, c in list(self.started.fired)]

    def settled(self):
        """A whole pass of the trigger ran since now (everything due has fired)."""
        self.started.settled()

    def stop(self):
        self.started.stop()


@pytest.fixture
def schedulers(started_trigger):
    return lambda project: Scheduler(started_trigger(CronTrigger(), project))


def test_fires_once_per_tick_and_never_twice_across_restart(project, clock, schedulers):
    first = schedulers(project)
    first.settled()
    assert first.fired == [], "nothing was due at start"
    clock.set(at(12, 5, 0.2))
    assert wait_until(lambda: len(first.fired) == 2, timeout=10, interval=0.02)
    assert sorted(first.fired) == [("every5", at(12, 5), True), ("nocatch", at(12, 5), True)]
    first.stop()

    second = schedulers(project)  # restart at the same time: the 12:05 tick is already claimed
    second.settled()
    assert second.fired == []
    assert second.engine.store.last_tick("cron:every5") == at(12, 5)
    assert second.engine.store.queue_depth()["every5"] == 1
    second.stop()


def test_single_catch_up_after_downtime_unless_disabled(project, clock, schedulers):
    first = schedulers(project)
    clock.set(at(12, 5, 0.1))
    assert wait_until(lambda: len(first.fired) == 2, timeout=10, interval=0.02)
    first.stop()

    clock.set(at(12, 31))  # down while 12:10 ... 12:30 passed
    second = schedulers(project)
    assert wait_until(lambda: second.fired, timeout=10, interval=0.02)
    second.settled()
    assert second.fired == [("every5", at(12, 30), True)], "one catch-up, for the latest tick"
    assert second.engine.store.last_tick("cron:nocatch") == at(12, 5), "catchUp = false skipped"

    clock.set(at(12, 35, 0.3))
    assert wait_until(lambda: len(second.fired) == 3, timeout=10, interval=0.02)
    assert sorted(second.fired[1:]) == [("every5", at(12, 35), True), ("nocatch", at(12, 35), True)]


def test_two_hosts_fire_each_tick_once(project, clock, schedulers):
    one, two = schedulers(project), schedulers(project)
    for minute in (5, 10, 15):
        clock.set(at(12, minute, 0.1))
        assert wait_until(
            lambda m=minute: sum(f[1] == at(12, m) for f in one.fired + two.fired) == 2,
            timeout=10,
            interval=0.02,
        )
    one.settled()
    two.settled()
    ticks = sorted(f[:2] for f in one.fired + two.fired)
    assert ticks == sorted((a, at(12, m)) for a in ("every5", "nocatch") for m in (5, 10, 15))


def test_pending_ticks_coalesce_into_one_run(project, clock, schedulers):
    scheduler = schedulers(project)
    for minute in (5, 10, 15):
        clock.set(at(12, minute, 0.1))
        assert wait_until(
            lambda m=minute: any(f[1] == at(12, m) for f in scheduler.fired),
            timeout=10,
            interval=0.02,
        )
    assert scheduler.engine.store.queue_depth()["every5"] == 1


def test_real_clock_fires_within_a_second(tmp_project, monkeypatch, tmp_path, schedulers):
    monkeypatch.delenv("AL_FAKE_CLOCK_FILE", raising=False)
    monkeypatch.setenv("AL_CREDENTIALS_DIR", str(tmp_path / "credentials"))
    tmp_project.config("")
    tmp_project.add_agent("fast", 'every = "1s"\n')
    lags: list[float] = []  # wall-clock delay of each fire after its tick
    scheduler = schedulers(tmp_project)
    emit_once = scheduler.started.ctx.emit_once

    def timed(key, tick, event, *, coalesce=False):
        lags.append(time.time() - tick)
        return emit_once(key, tick, event, coalesce=coalesce)

    scheduler.started.ctx.emit_once = timed
    assert wait_until(lambda: len(scheduler.fired) >= 3, timeout=4, interval=0.02)
    assert all(0 <= lag < 1.0 for lag in lags), lags
    ticks = [tick for _, tick, _ in scheduler.fired]
    assert ticks == sorted(set(ticks)), "each second fires once, in order"


# ---------------------------------------------------------------- plans and validation


def test_plan_ticks_in_a_zone_and_intervals():
    plan = Plan.from_config("a", {"schedule": "0 9 * * 1-5", "timezone": "Europe/Berlin"})
    monday_9_berlin = datetime(2026, 1, 5, 8, 0, tzinfo=UTC).timestamp()  # CET = UTC+1
    assert plan.following(monday_9_berlin - 10) == monday_9_berlin
    assert plan.latest(monday_9_berlin) == monday_9_berlin
    assert plan.latest(monday_9_berlin - 0.5) < monday_9_berlin
    interval = Plan.from_config("b", {"every": "10m"})
    assert interval.latest(at(12, 19)) == at(12, 10)
    assert interval.following(at(12, 10)) == at(12, 20)


def test_no_timezone_is_the_machines_zone_with_its_daylight_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    zone = parse_timezone(None)
    assert datetime(2026, 1, 5, 12, tzinfo=zone).utcoffset().total_seconds() == 3600
    assert datetime(2026, 7, 6, 12, tzinfo=zone).utcoffset().total_seconds() == 7200
    monkeypatch.setenv("TZ", ":America/New_York")  # libc's leading colon
    assert datetime(2026, 1, 5, 12, tzinfo=parse_timezone(None)).utcoffset().days == -1
    monkeypatch.setenv("TZ", "Not/AZone")  # unknown: the machine's file, else UTC, never an error
    assert parse_timezone(None) is not None


def test_next_fire_for_al_stat(project):
    trigger = CronTrigger()
    agents = project.load().agents
    assert trigger.next_fire(agents["every5"], at(12, 3)) == at(12, 5)
    assert trigger.next_fire(agents["manual"], at(12, 3)) is None
    project.add_agent("february", 'schedule = "0 0 31 2 *"\n')
    assert trigger.next_fire(project.load().agents["february"], at(12, 3)) == math.inf


@pytest.mark.parametrize(
    ("config", "key", "text"),
    [
        ({"schedule": "* * *"}, "schedule", "expected 5 fields"),
        ({"schedule": "61 * * * *"}, "schedule", "minute 61 is out of range 0-59"),
        ({"schedule": "0 25 * * *"}, "schedule", "hour 25 is out of range 0-23"),
        ({"schedule": "*/61 * * * *"}, "schedule", "minute step 61 is out of range 1-60"),
        ({"schedule": "* * * * *", "timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"every": "soon"}, "every", "expected a duration"),
        ({"every": "0s"}, "every", "positive duration"),
        ({"schedule": "* * * * *", "every": "1m"}, "every", "not both"),
    ],
)
def test_validation_names_the_key(tmp_project, config, key, text):
    tmp_project.config("")
    lines = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in config.items())
    tmp_project.add_agent("bad", lines + "\n")
    agent = tmp_project.load().agents["bad"]
    problems = CronTrigger().validate(agent)
    assert len(problems) == 1 and isinstance(problems[0], ConfigError)
    assert problems[0].key == key and text in problems[0].message
    assert problems[0].file.endswith("agents/bad/config.toml")


def test_reconfigure_applies_a_live_reload_from_the_next_tick(project, clock, schedulers):
    """After a live reload (the engine runs the new project, then ``reconfigure(ctx)``): a
    changed schedule applies, a new agent fires, a removed one no more."""
    scheduler = schedulers(project)
    project.add_agent("every5", 'schedule = "*/10 * * * *"\ntimezone = "UTC"\n')
    project.add_agent("every2", 'schedule = "*/2 * * * *"\ntimezone = "UTC"\n')
    (project.root / "agents/nocatch/SKILL.md").unlink()
    scheduler.engine.project = project.load()
    scheduler.started.trigger.reconfigure(scheduler.started.ctx)

    clock.set(at(12, 5, 0.2))
    assert wait_until(lambda: scheduler.fired, timeout=10, interval=0.02)
    time.sleep(0.7)
    assert scheduler.fired == [("every2", at(12, 4), True)], "every5 now fires on */10 only"
    clock.set(at(12, 10, 0.2))
    assert wait_until(lambda: len(scheduler.fired) == 3, timeout=10, interval=0.02)
    assert sorted(scheduler.fired[1:]) == [
        ("every2", at(12, 10), True),
        ("every5", at(12, 10), True),
    ]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("0 25 * * *", "schedule: hour 25 is out of range 0-23"),
        ("*/61 * * * *", "schedule: minute step 61 is out of range 1-60"),
        # The value written is quoted (issue 42 item 13): 70, not 60, the first value past
        # the range; FRX, not the F of 1-FRX (what MON-FRX reads as once MON is a number).
        ("1-70 * * * *", "schedule: minute 70 is out of range 0-59"),
        ("10-70/5 * * * *", "schedule: minute 70 is out of range 0-59"),
        ("* * * * MON-FRX", "schedule: weekday 'MON-FRX': 'FRX' is not allowed here"),
        ("* * * JAN-FEX *", "schedule: month 'JAN-FEX': 'FEX' is not allowed here"),
        ("* * 1-5x * *", "schedule: day of month '1-5x': '5x' is not allowed here"),
    ],
)
def test_al_validate_names_the_cron_field(offline_project, schedule, message):
    offline_project.add_scripted_agent("nightly", f'schedule = "{schedule}"\n')
    result = offline_project.al("validate")
    assert result.returncode == 2
    assert f"agents/nightly/config.toml: {message}" in result.stdout + result.stderr


def test_a_schedule_that_never_fires_is_a_warning_and_the_agent_runs_by_hand(
    offline_project, scheduler
):
    """Action Llama's idiom for an agent run only by hand or by call (issue 42 item 1):
    February 31st validates with one warning, the scheduler starts it, ``al stat`` says its
    next fire is never, and ``al run`` runs it."""
    offline_project.add_scripted_agent(
        "manual", 'schedule = "0 0 31 2 *"\n', script='[[turns]]\ntext = "ran by hand"\n'
    )
    checked = offline_project.al("validate")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # (The offline project's agents run as the current user: that is warned about too.)
    warnings = [line for line in checked.stdout.splitlines() if "run_as" not in line]
    assert warnings == [
        "warning: agents/manual/config.toml: schedule: '0 0 31 2 *' never fires (no such date): "
        "the agent runs only when called or by hand",
        "ok  agents/manual",
    ]
    running = scheduler(offline_project)
    row = running.get("/control/stat").json()["agents"][0]
    assert (row["next_fire"], row["never_fires"]) == (None, True)
    table = offline_project.al("stat", check=True).stdout
    assert [line.split()[5] for line in table.splitlines() if line.startswith("manual")] == [
        "never"
    ]
    offline_project.al("run", "manual", check=True)
    done = offline_project.wait_run(lambda runs: [r for r in runs if r.state == "done"])
    assert [(r.agent, r.trigger_kind) for r in done] == [("manual", "manual")]


def test_six_field_schedule_fires_every_ten_seconds(project, clock, schedulers):
    project.add_agent("tensec", 'schedule = "*/10 * * * * *"\ntimezone = "UTC"\n')
    first = schedulers(project)
    first.settled()  # the tick due at start fires before the clock moves on
    clock.set(at(12, 0, 41))
    first.settled()
    clock.set(at(12, 0, 51))
    first.settled()
    fired = [tick for agent, tick, _ in first.fired if agent == "tensec"]
    # T0 (12:00:30) is itself a tick: due at start, then every ten seconds.
    assert fired == [at(12, 0, 30), at(12, 0, 40), at(12, 0, 50)]

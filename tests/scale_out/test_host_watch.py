"""Host liveness as one scheduler judges the others' heartbeats (no database needed)."""

from __future__ import annotations

import pytest

from llamaherd import scheduler
from llamaherd.scheduler import HostWatch, host_stale_after
from llamaherd.types import LlamaherdError


class Ticker:
    """The watch's own monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticker() -> Ticker:
    return Ticker()


def row(name: str, at: float, beat: int) -> dict:
    return {"host": name, "info": {"pid": 1, "beat": beat}, "heartbeat_at": at}


def test_a_host_is_dead_once_its_heartbeat_stops_changing_for_stale_after(ticker):
    watch = HostWatch(5.0, clock=ticker)
    assert watch.dead([row("a:1", 10.0, 1), row("b:2", 10.0, 1)]) == set()
    ticker.now += 4.9
    assert watch.dead([row("a:1", 14.9, 2), row("b:2", 10.0, 1)]) == set()
    ticker.now += 0.2
    assert watch.dead([row("a:1", 15.1, 3), row("b:2", 10.0, 1)]) == {"b:2"}


def test_clock_skew_or_a_standing_clock_never_kills_a_beating_host(ticker):
    watch = HostWatch(5.0, clock=ticker)
    # Its clock is an hour behind ours and stands still (a fake clock): the beat still moves.
    for beat in range(1, 20):
        assert watch.dead([row("skewed:1", 10.0 - 3600, beat)]) == set()
        ticker.now += 1.0


def test_a_host_first_seen_is_not_judged_until_watched_for_stale_after(ticker):
    watch = HostWatch(5.0, clock=ticker)
    assert watch.dead([row("old:1", 0.0, 7)]) == set()  # its heartbeat is ancient, but unseen
    ticker.now += 5.0
    assert watch.dead([row("old:1", 0.0, 7)]) == {"old:1"}
    assert watch.dead([]) == set(), "a forgotten host is no longer watched"


def test_stale_after_comes_from_the_environment_and_bad_values_are_one_line(monkeypatch):
    monkeypatch.delenv("AL_HOST_STALE_AFTER", raising=False)
    assert host_stale_after() == scheduler.HOST_STALE_AFTER
    monkeypatch.setenv("AL_HOST_STALE_AFTER", "2.5")
    assert host_stale_after() == 2.5
    for bad in ("soon", "0.5", "-3"):
        monkeypatch.setenv("AL_HOST_STALE_AFTER", bad)
        with pytest.raises(LlamaherdError, match="AL_HOST_STALE_AFTER: expected seconds above 1"):
            host_stale_after()

"""Cron expressions parse and fire as croner (Action Llama's cron library) has them.

``data/croner_vectors.json`` holds croner 10.0.1's answers (``data/croner_vectors.mjs``
regenerates it): for each pattern, valid or not, and its next and previous ticks from a few
starts in three zones, across both daylight-saving changes of 2026.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from llamaherd_cron.pattern import CronError, CronPattern, next_ticks

VECTORS = json.loads((Path(__file__).parent / "data" / "croner_vectors.json").read_text())
# croner 10.0.1 searches past the end of a short month and lands on a normalised date ("Feb
# 30" = 2 March), skipping the 1st of the next month: from 27 February these fire on 1 March
# with us, not with croner (a croner bug; noted in docs/migrating-from-action-llama.md).
CRONER_ROLLOVER_BUG = {"0 12 1 * MON", "0 0 */5 * *"}
FEB_27 = datetime(2026, 2, 27, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: repr(v["pattern"]))
def test_as_croner_parses_and_fires(vector):
    if not vector["valid"]:
        with pytest.raises(CronError):
            CronPattern.parse(vector["pattern"])
        return
    pattern = CronPattern.parse(vector["pattern"])
    for run in vector["runs"]:
        if vector["pattern"] in CRONER_ROLLOVER_BUG and 0 <= run["start"] - FEB_27 < 86400:
            continue
        zone = ZoneInfo(run["timezone"])
        if not run["next"]:  # valid, and never fires (0 0 30 2 *): accepted, as croner does
            assert pattern.following(run["start"], zone) is None
        ticks, at = [], run["start"]
        while len(ticks) < len(run["next"]):
            at = pattern.following(at, zone)
            ticks.append(at)
        assert ticks == run["next"], (run["timezone"], run["start"])
        if "prev" not in run:
            continue
        previous, at = [], run["start"]
        while len(previous) < len(run["prev"]):
            at = pattern.latest(at - 1, zone)  # croner's previous runs are strictly before
            previous.append(at)
        assert previous == run["prev"], (run["timezone"], run["start"])


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 25 * * *", "hour 25 is out of range 0-23"),
        ("*/61 * * * *", "minute step 61 is out of range 1-60"),
        ("61 * * * *", "minute 61 is out of range 0-59"),
        ("0 0 32 * *", "day of month 32 is out of range 1-31"),
        ("0 0 0 * *", "day of month 0 is out of range 1-31"),
        ("0 0 * 13 *", "month 13 is out of range 1-12"),
        ("0 0 * * 8", "weekday 8 is out of range 0-7"),
        ("61 * * * * *", "second 61 is out of range 0-59"),
        ("0 0 0 1 1 * 10000", "year 10000 is out of range 1-9999"),
        ("*/0 * * * *", "minute step 0 is out of range 1-60"),
        ("0 0 * * */8", "weekday step 8 is out of range 1-7"),
        ("5-1 * * * *", "minute range 5-1 runs backwards"),
        ("1/5 * * * *", "a step needs * or a range before it"),
        ("* * * *", "expected 5 fields"),
        ("0 0 * * 1#6", "must be 1-5 or L"),
        ("0 0 1-5W * *", "W takes a single day"),
        ("a * * * *", "'a' is not allowed here"),
        ("1,,2 * * * *", "has an empty entry"),
        ("@reboot", "@reboot is not supported"),
    ],
)
def test_errors_name_the_field_and_its_range(expr, message):
    with pytest.raises(CronError, match=message.replace("*", r"\*")):
        CronPattern.parse(expr)


def test_seconds_field_fires_every_ten_seconds():
    start = datetime(2026, 1, 5, 12, 0, 3, tzinfo=UTC).timestamp()
    assert [t - start for t in next_ticks("*/10 * * * * *", start, count=3)] == [7, 17, 27]


def test_daylight_saving_gap_and_repeat_as_croner():
    berlin = ZoneInfo("Europe/Berlin")
    spring = datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp()
    # 02:30 does not exist on 29 March in Berlin: it fires at 03:30 CEST (01:30 UTC).
    assert next_ticks("30 2 * * *", spring, berlin, 1) == [
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC).timestamp()
    ]
    autumn = datetime(2026, 10, 24, 12, tzinfo=UTC).timestamp()
    # 02:30 happens twice on 25 October: it fires once, at the first (00:30 UTC).
    assert next_ticks("30 2 * * *", autumn, berlin, 2) == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC).timestamp(),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC).timestamp(),
    ]

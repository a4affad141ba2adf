"""Cron expressions as Action Llama reads them (it uses the croner library, 10.x).

Five fields (``minute hour day month weekday``), six with seconds first, or seven with a year
last; the macros ``@yearly``/``@annually``, ``@monthly``, ``@weekly``, ``@daily``/``@midnight``,
``@hourly``; names (``JAN``, ``MON``), ``?`` as ``*``, ``L`` (last day of the month, or
``5L``/``5#L``: the last Friday), ``W`` (nearest weekday: ``15W``, ``LW``), ``#`` (``MON#2``)
and ``+`` before the weekday field (day of month AND weekday). Steps need ``*`` or a range
before them (``*/5``, ``10-40/5``), as in croner.

Day of month and weekday combine as in Vixie cron: when both are restricted a day matching
either fires, unless ``+``; croner's quirks are kept (``?`` in the day of month does not count
as unrestricted). Ticks are local wall-clock times in the plan's zone: a time skipped by a
daylight-saving jump fires at the same offset after it, and a repeated hour fires once, at its
first occurrence (as croner does).

Errors name the field and its range: ``hour 25 is out of range 0-23``.
"""

from __future__ import annotations

import bisect
import calendar
import functools
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
SEARCH_YEARS = 400  # the Gregorian calendar repeats itself every 400 years
LAST = 32  # the weekday bit for "the last one of the month" (5#L, 5L)
EVERY_OCCURRENCE = 63  # a plain weekday: its 1st to 5th occurrence and the last


@dataclass(frozen=True)
class Field:
    """One position of the expression: its name in messages, its range, how many values a
    step may span (croner allows ``*/60`` for minutes, ``*/7`` for weekdays)."""

    name: str
    low: int
    high: int
    span: int
    allowed: str  # characters beside digits , - / *


SECOND = Field("second", 0, 59, 60, "")
MINUTE = Field("minute", 0, 59, 60, "")
HOUR = Field("hour", 0, 23, 24, "")
DAY = Field("day of month", 1, 31, 31, "LW")
MONTH = Field("month", 1, 12, 12, "")
WEEKDAY = Field("weekday", 0, 7, 7, "#L")
YEAR = Field("year", 1, 9999, 10000, "")
FIELDS = (SECOND, MINUTE, HOUR, DAY, MONTH, WEEKDAY, YEAR)


class CronError(ValueError):
    """An expression croner would refuse, said as ``<field> <value> is out of range ...``."""


def _number(text: str, field: Field, entry: str) -> int:
    """A decimal value as croner reads it (``parseInt``: leading digits count)."""
    digits = re.match(r"\d+", text)
    if digits is None:
        raise CronError(f"{field.name} {entry!r} is not a number")
    return int(digits.group())


def _check(value: int, field: Field) -> int:
    if not field.low <= value <= field.high:
        raise CronError(f"{field.name} {value} is out of range {field.low}-{field.high}")
    return value


def _check_step(step: int, field: Field) -> int:
    if not 1 <= step <= field.span:
        raise CronError(f"{field.name} step {step} is out of range 1-{field.span}")
    return step


def _nth(entry: str, field: Field) -> tuple[str, int]:
    """Split a weekday's ``#n`` or trailing ``L``: (the rest, its occurrence bits)."""
    if "#" in entry:
        if field is not WEEKDAY:
            raise CronError(f"{field.name} {entry!r}: # (nth weekday) is only allowed in weekday")
        rest, _, nth = entry.partition("#")
        if nth == "":  # croner reads "5#" as "5"
            return rest, EVERY_OCCURRENCE
        if nth.upper() == "L":
            return rest, LAST
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise CronError(f"weekday {entry!r}: the occurrence after # must be 1-5 or L")
        return rest, 1 << (int(nth) - 1)
    if entry.upper().endswith("L"):
        if field is not WEEKDAY:
            raise CronError(f"{field.name} {entry!r}: L here is only allowed in weekday")
        return entry[:-1], LAST
    return entry, EVERY_OCCURRENCE


def _values(entry: str, field: Field) -> list[int]:
    """The values one comma-separated entry of ``field`` selects (before L/W/# handling)."""
    if entry == "*":
        return list(range(field.low, field.high + 1))
    if "/" in entry:
        base, _, step_text = entry.partition("/")
        if "/" in step_text:
            raise CronError(f"{field.name} {entry!r}: one step at most")
        step = _check_step(_number(step_text, field, entry), field)
        if base == "*":
            if field is YEAR:  # croner counts years from 0, which it then refuses
                raise CronError(f"year {entry!r}: a year step needs a range (2026-2030/2)")
            start, stop = field.low, field.low + field.span - 1
        elif "-" in base:
            start, stop = _range(base, field, entry)
        else:
            raise CronError(
                f"{field.name} {entry!r}: a step needs * or a range before it "
                f"(*/{step_text} or {field.low}-{field.high}/{step_text})"
            )
        return [_check(v, field) for v in range(start, stop + 1, step)]
    if "-" in entry:
        start, stop = _range(entry, field, entry)
        return [_check(v, field) for v in range(start, stop + 1)]
    return [_check(_number(entry, field, entry), field)]


def _range(text: str, field: Field, entry: str) -> tuple[int, int]:
    parts = text.split("-")
    if len(parts) != 2:
        raise CronError(f"{field.name} {entry!r} is not a range (expected a-b)")
    # Both ends checked: ``1-70`` names 70, the value written, not 60, the first one past the
    # field's end.
    start, stop = (_check(_number(part, field, entry), field) for part in parts)
    if start > stop:
        raise CronError(f"{field.name} range {start}-{stop} runs backwards")
    return start, stop


def _names(text: str, names: list[str], first: int) -> str:
    """Month or day names as numbers (croner: case-insensitive, only in fields of 3+ chars)."""
    if len(text) < 3:
        return text
    if names is DAY_NAMES:
        text = re.sub("-sun", "-7", text, flags=re.IGNORECASE)
    for index, name in enumerate(names):
        text = re.sub(name, str(index + first), text, flags=re.IGNORECASE)
    return text


def _split_fields(expr: str) -> list[str]:
    text = expr.strip()
    if "@" in text:
        if text.lower() == "@reboot":
            raise CronError("@reboot is not supported: give a schedule such as @hourly")
        text = MACROS.get(text.lower(), text)
    parts = text.split()
    if not 5 <= len(parts) <= 7:
        raise CronError(
            f"expected 5 fields (minute hour day month weekday), 6 with seconds first or 7 "
            f"with a year last; got {len(parts)} in {expr!r}"
        )
    if len(parts) == 5:
        parts.insert(0, "0")
    if len(parts) == 6:
        parts.append("*")
    return parts


@dataclass(frozen=True)
class CronPattern:
    """A parsed expression: the values of each field and the day-of-month/weekday rules."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    years: tuple[int, ...] | None  # None: every year
    days: frozenset[int]
    nearest: frozenset[int]  # ``15W``: the weekday nearest these days
    weekdays: tuple[int, ...]  # occurrence bits per weekday, Sunday first (0 = not selected)
    last_day: bool  # ``L`` in the day of month
    last_weekday: bool  # ``LW``
    star_day: bool  # the day of month is ``*`` (croner: ``?`` does not count)
    star_weekday: bool
    and_logic: bool  # ``+`` before the weekday field

    @classmethod
    def parse(cls, expr: str) -> CronPattern:
        """The pattern of ``expr``; CronError naming the field and what it allows. Parsed
        once per expression (patterns are immutable; agents often share a schedule)."""
        return _parse(cls, expr)

    @classmethod
    def _parse(cls, expr: str) -> CronPattern:
        sec, minute, hour, day, month, weekday, year = _split_fields(expr)
        written = dict(zip(FIELDS, (sec, minute, hour, day, month, weekday, year), strict=True))
        last_weekday = day.upper() == "LW"
        last_day = not last_weekday and "L" in day.upper()
        day = "" if last_weekday else day.replace("L", "").replace("l", "")
        month = _names(month, MONTH_NAMES, 1)
        weekday = _names(weekday, DAY_NAMES, 0)
        and_logic = weekday.startswith("+")
        if and_logic:
            weekday = weekday[1:]
            if not weekday:
                raise CronError("weekday: '+' must be followed by the weekdays it requires")
        star_day, star_weekday = day == "*", weekday == "*"
        if "?" in expr:
            sec, minute, hour, day, month, weekday, year = (
                part.replace("?", "*") for part in (sec, minute, hour, day, month, weekday, year)
            )
        raw = dict(zip(FIELDS, (sec, minute, hour, day, month, weekday, year), strict=True))
        for field, text in raw.items():
            _allowed(field, text, written[field])
        days, nearest, bits = set(), set(), [0] * 7
        for entry in _entries(day, DAY, allow_empty=last_day or last_weekday):
            if "W" in entry.upper():
                if "-" in entry or "/" in entry:
                    raise CronError(f"day of month {entry!r}: W takes a single day (15W)")
                nearest.add(_check(_number(entry, DAY, entry), DAY))
            else:
                days.update(_values(entry, DAY))
        for entry in _entries(weekday, WEEKDAY):
            rest, occurrences = _nth(entry, WEEKDAY)
            for value in _values(rest, WEEKDAY):
                bits[value % 7] |= occurrences  # 7 is Sunday too
        years = None if year == "*" else tuple(sorted(_set(year, YEAR)))
        return cls(
            seconds=tuple(sorted(_set(sec, SECOND))),
            minutes=tuple(sorted(_set(minute, MINUTE))),
            hours=tuple(sorted(_set(hour, HOUR))),
            months=tuple(sorted(_set(month, MONTH))),
            years=years,
            days=frozenset(days),
            nearest=frozenset(nearest),
            weekdays=tuple(bits),
            last_day=last_day,
            last_weekday=last_weekday,
            star_day=star_day,
            star_weekday=star_weekday,
            and_logic=and_logic,
        )

    # ------------------------------------------------------------------ days
    def day_matches(self, year: int, month: int, day: int) -> bool:
        """Whether ``year-month-day`` is one of the pattern's days (croner's rules)."""
        length = calendar.monthrange(year, month)[1]
        hit = day in self.days
        if not hit and self.nearest:
            hit = any(_nearest_weekday(year, month, n, length) == day for n in self.nearest)
        if self.last_weekday and day == _last_weekday(year, month, length):
            hit = True
        if self.last_day and day == length:
            hit = True
        if self.star_weekday:
            return hit
        bits = self.weekdays[(calendar.weekday(year, month, day) + 1) % 7]
        weekday_hit = bool(bits) and (
            bool(bits & (1 << ((day - 1) // 7))) or bool(bits & LAST and day + 7 > length)
        )
        if self.and_logic or self.star_day:
            return hit and weekday_hit
        return hit or weekday_hit

    # ------------------------------------------------------------------ search
    def following(self, now: float, zone: tzinfo) -> float | None:
        """The earliest tick strictly after ``now`` (epoch seconds), or None if none comes.
        Remembered for the latest few (pattern, time, zone): a scheduler's start asks it of
        every agent at one moment, and agents share schedules."""
        return _following(self, now, zone)

    def latest(self, now: float, zone: tzinfo) -> float | None:
        """The latest tick at or before ``now`` (epoch seconds), or None (remembered as
        ``following``)."""
        return _latest(self, now, zone)

    def _following(self, now: float, zone: tzinfo) -> float | None:
        start = _local(math.floor(now), zone) + timedelta(seconds=1)
        limit = self._last_year(start.year + SEARCH_YEARS)
        while (found := self._forward(start, limit)) is not None:
            tick = _epoch(found, zone)
            if tick > now:
                return tick
            start = found + timedelta(seconds=1)  # the repeated hour of a DST change
        return None

    def _latest(self, now: float, zone: tzinfo) -> float | None:
        start = _local(math.floor(now), zone)
        # In the repeated hour of a DST change, naive times after now's may have fired at their
        # first occurrence, before now: look from the end of the repetition back.
        start += _repeated_overlap(math.floor(now), zone)
        limit = start.year - SEARCH_YEARS
        if self.years is not None:
            limit = max(limit, self.years[0])
        while (found := self._backward(start, limit)) is not None:
            tick = _epoch(found, zone)
            if tick <= now:
                return tick
            start = found - timedelta(seconds=1)
        return None

    def _last_year(self, limit: int) -> int:
        return min(self.years[-1], YEAR.high) if self.years is not None else limit

    def _forward(self, at: datetime, last_year: int) -> datetime | None:
        """The earliest naive local time at or after ``at`` the pattern selects."""
        y, mo, d, h, mi, s = at.year, at.month, at.day, at.hour, at.minute, at.second
        while y <= last_year:
            if self.years is not None and y not in self.years:
                nxt = _at_or_after(self.years, y)
                if nxt is None:
                    return None
                y, mo, d, h, mi, s = nxt, 1, 1, 0, 0, 0
                continue
            month = _at_or_after(self.months, mo)
            if month is None:
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
                continue
            if month != mo:
                mo, d, h, mi, s = month, 1, 0, 0, 0
            day = self._day_at_or_after(y, mo, d)
            if day is None:
                y, mo = (y, mo + 1) if mo < 12 else (y + 1, 1)
                d, h, mi, s = 1, 0, 0, 0
                continue
            if day != d:
                d, h, mi, s = day, 0, 0, 0
            time = self._time_at_or_after(h, mi, s)
            if time is None:
                nxt_day = datetime(y, mo, d) + timedelta(days=1)
                y, mo, d, h, mi, s = nxt_day.year, nxt_day.month, nxt_day.day, 0, 0, 0
                continue
            return datetime(y, mo, d, *time)
        return None

    def _backward(self, at: datetime, first_year: int) -> datetime | None:
        """The latest naive local time at or before ``at`` the pattern selects."""
        y, mo, d, h, mi, s = at.year, at.month, at.day, at.hour, at.minute, at.second
        while y >= max(first_year, YEAR.low):
            if self.years is not None and y not in self.years:
                prev = _at_or_before(self.years, y)
                if prev is None:
                    return None
                y, mo, d, h, mi, s = prev, 12, 31, 23, 59, 59
                continue
            month = _at_or_before(self.months, mo)
            if month is None:
                y, mo, d, h, mi, s = y - 1, 12, 31, 23, 59, 59
                continue
            if month != mo:
                mo, d, h, mi, s = month, 31, 23, 59, 59
            d = min(d, calendar.monthrange(y, mo)[1])
            day = self._day_at_or_before(y, mo, d)
            if day is None:
                y, mo = (y, mo - 1) if mo > 1 else (y - 1, 12)
                d, h, mi, s = 31, 23, 59, 59
                continue
            if day != d:
                d, h, mi, s = day, 23, 59, 59
            time = self._time_at_or_before(h, mi, s)
            if time is None:
                prev_day = datetime(y, mo, d) - timedelta(days=1)
                y, mo, d, h, mi, s = prev_day.year, prev_day.month, prev_day.day, 23, 59, 59
                continue
            return datetime(y, mo, d, *time)
        return None

    def _day_at_or_after(self, year: int, month: int, day: int) -> int | None:
        length = calendar.monthrange(year, month)[1]
        return next((d for d in range(day, length + 1) if self.day_matches(year, month, d)), None)

    def _day_at_or_before(self, year: int, month: int, day: int) -> int | None:
        return next((d for d in range(day, 0, -1) if self.day_matches(year, month, d)), None)

    def _time_at_or_after(self, h: int, mi: int, s: int) -> tuple[int, int, int] | None:
        hour = _at_or_after(self.hours, h)
        if hour is None:
            return None
        if hour != h:
            mi, s = 0, 0
        minute = _at_or_after(self.minutes, mi)
        if minute is None:
            return self._time_at_or_after(hour + 1, 0, 0) if hour < 23 else None
        if minute != mi:
            s = 0
        second = _at_or_after(self.seconds, s)
        if second is None:
            if minute < 59:
                return self._time_at_or_after(hour, minute + 1, 0)
            return self._time_at_or_after(hour + 1, 0, 0) if hour < 23 else None
        return hour, minute, second

    def _time_at_or_before(self, h: int, mi: int, s: int) -> tuple[int, int, int] | None:
        hour = _at_or_before(self.hours, h)
        if hour is None:
            return None
        if hour != h:
            mi, s = 59, 59
        minute = _at_or_before(self.minutes, mi)
        if minute is None:
            return self._time_at_or_before(hour - 1, 59, 59) if hour > 0 else None
        if minute != mi:
            s = 59
        second = _at_or_before(self.seconds, s)
        if second is None:
            if minute > 0:
                return self._time_at_or_before(hour, minute - 1, 59)
            return self._time_at_or_before(hour - 1, 59, 59) if hour > 0 else None
        return hour, minute, second


def _allowed(field: Field, text: str, written: str) -> None:
    """CronError when ``text`` (the field once names became numbers) holds a character the
    field does not take, quoting the field and the piece of it at fault as they were written
    (``MON-FRX``: ``FRX``, not the ``F`` of ``1-FRX``)."""
    pattern = f"[^0-9,*/\\-{field.allowed}{field.allowed.lower()}]"
    if not re.search(pattern, text):
        return
    names = MONTH_NAMES if field is MONTH else DAY_NAMES if field is WEEKDAY else []
    pieces = [piece for piece in re.split(r"[,/\-#+]", written) if piece]
    # A piece is read as croner reads the field: names become numbers, ``?`` is ``*``.
    fault = next(
        (p for p in pieces if re.search(pattern, _names(p, names, 1 if field is MONTH else 0))),
        written,
    )
    raise CronError(f"{field.name} {written!r}: {fault!r} is not allowed here")


def _entries(text: str, field: Field, allow_empty: bool = False) -> list[str]:
    if text == "" and allow_empty:
        return []
    entries = text.split(",")
    for entry in entries:
        if entry == "" and not allow_empty:
            raise CronError(f"{field.name} {text!r} has an empty entry")
    return [entry for entry in entries if entry]


def _set(text: str, field: Field) -> set[int]:
    values: set[int] = set()
    for entry in _entries(text, field):
        values.update(_values(entry, field))
    return values


def _at_or_after(values: tuple[int, ...], value: int) -> int | None:
    index = bisect.bisect_left(values, value)
    return values[index] if index < len(values) else None


def _at_or_before(values: tuple[int, ...], value: int) -> int | None:
    index = bisect.bisect_right(values, value)
    return values[index - 1] if index else None


def _nearest_weekday(year: int, month: int, day: int, length: int) -> int:
    """croner's ``W``: the weekday nearest ``day`` within its month (-1 past its end)."""
    if day > length:
        return -1
    weekday = calendar.weekday(year, month, day)  # Monday = 0
    if weekday == 6:  # Sunday
        return day - 2 if day == length else day + 1
    if weekday == 5:  # Saturday
        return day + 2 if day == 1 else day - 1
    return day


def _last_weekday(year: int, month: int, length: int) -> int:
    weekday = calendar.weekday(year, month, length)
    return length - 2 if weekday == 6 else length - 1 if weekday == 5 else length


def _local(epoch: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(epoch, zone).replace(tzinfo=None, fold=0)


def _epoch(naive: datetime, zone: tzinfo) -> float:
    """A naive local time's epoch: its first occurrence; a time skipped by a DST jump counts
    with the offset before the jump (02:30 of a 02:00→03:00 night is 03:30)."""
    return naive.replace(tzinfo=zone, fold=0).timestamp()


def _repeated_overlap(epoch: int, zone: tzinfo) -> timedelta:
    """How far ``epoch``'s local time is from the end of a repeated hour it is in the second
    pass of (zero outside one)."""
    aware = datetime.fromtimestamp(epoch, zone)
    first = aware.replace(fold=0).utcoffset()
    second = aware.replace(fold=1).utcoffset()
    if first is None or second is None or first <= second:
        return timedelta(0)
    return first - second


def next_ticks(expr: str, start: float, zone: tzinfo = UTC, count: int = 5) -> list[float]:
    """The next ``count`` ticks after ``start`` (for previews and tests)."""
    pattern, ticks = CronPattern.parse(expr), []
    while len(ticks) < count and (tick := pattern.following(start, zone)) is not None:
        ticks.append(tick)
        start = tick
    return ticks


@functools.lru_cache(maxsize=4096)
def _parse(cls: type[CronPattern], expr: str) -> CronPattern:
    return cls._parse(expr)


@functools.lru_cache(maxsize=1024)
def _following(pattern: CronPattern, now: float, zone: tzinfo) -> float | None:
    return pattern._following(now, zone)


@functools.lru_cache(maxsize=1024)
def _latest(pattern: CronPattern, now: float, zone: tzinfo) -> float | None:
    return pattern._latest(now, zone)

"""Piped, a view prints without importing rich exactly what rich prints: the same markup
grammar (``llamaherd.markup``), the same columns two spaces apart, the same alignment.
Checked against rich itself on generated tables and markup."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.errors import MarkupError
from rich.markup import escape as rich_escape
from rich.text import Text

from llamaherd import tables
from llamaherd.markup import escape, plain
from llamaherd.tables import Column, Sheet

# Letters, digits, punctuation with the markup's own brackets and backslashes, accented and
# combining characters, wide ones (CJK, emoji), and those whose width Python's unicodedata
# and a terminal disagree on (a zero-width joiner within a word, a spacing mark, a Hangul
# vowel, a skin tone). A cell of a lone joiner is left out: rich pads it a cell too wide.
ODD = ["\u00e9", "e\u0301", "\u4e2d", "\u6587", "\u00df", "\U0001f600", "a\u200db", "\u0903",
       "\u1160", "\u2630", "\U0001f3fb"]  # fmt: skip
TEXT = st.lists(st.sampled_from([*"ab z09-_:/.,;()[]\\@#=", *ODD]), max_size=12).map("".join)


@pytest.fixture(autouse=True, scope="module")
def piped() -> Iterator[None]:
    """Output as piped whatever the environment of the tests says of terminals."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            patch.delenv(name, raising=False)
        yield


STYLES = st.sampled_from(["red", "bold", "dim", "bold red", "link=https://x.test/a"])


@st.composite
def markup_cells(draw: st.DrawFn) -> object:
    text = draw(TEXT)
    kind = draw(st.sampled_from(["escaped", "styled", "mixed", "text", "none", "number"]))
    if kind == "escaped":
        return escape(text)
    if kind == "styled":
        return f"[{draw(STYLES)}]{escape(text)}[/]"
    if kind == "mixed":
        return f"{escape(draw(TEXT))} [{draw(STYLES)}]{escape(text)}[/] {escape(draw(TEXT))}"
    if kind == "text":
        return Text(text + draw(st.sampled_from(["", "\nsecond line", "\tafter a tab"])))
    return None if kind == "none" else draw(st.integers(-5, 10**6))


@st.composite
def sheets(draw: st.DrawFn) -> Sheet:
    count = draw(st.integers(1, 5))
    columns = [
        Column(
            draw(st.from_regex(r"[a-z][a-z ]{0,9}", fullmatch=True)),
            justify=draw(st.sampled_from(["left", "right", "center"])),
            keep=draw(st.booleans()),
            footer=draw(st.sampled_from(["", "total", "[bold]7[/]"])),
        )
        for _ in range(count)
    ]
    rows = draw(st.lists(st.lists(markup_cells(), min_size=count, max_size=count), max_size=6))
    title = draw(st.sampled_from([None, "runs", "[bold]latest[/] runs"]))
    return Sheet.of(columns, rows, title)


def drawn_by_rich(view: tables.View) -> str:
    """What rich prints of ``view`` piped (a rich renderable is always drawn by rich)."""
    found = io.StringIO()
    tables.show(tables.to_rich(view), file=found)
    return found.getvalue()


def written_plain(view: tables.View) -> str:
    parts = [view] if isinstance(view, (Sheet, str)) else view
    return "".join(line + "\n" for part in parts for line in tables.plain_lines(part))


@settings(max_examples=300, deadline=None)
@given(sheets())
def test_a_piped_sheet_is_what_rich_prints(sheet: Sheet) -> None:
    assert written_plain(sheet) == drawn_by_rich(sheet)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(sheets(), markup_cells().filter(lambda c: isinstance(c, str))), max_size=4)
)
def test_a_piped_view_of_lines_and_sheets_is_what_rich_prints(view: list[tables.Part]) -> None:
    assert written_plain(view) == drawn_by_rich(view)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab[]/\\=#@ ")), max_size=16))
def test_markup_reads_and_escapes_as_rich_does(text: str) -> None:
    assert escape(text) == rich_escape(text)
    for markup in (text, escape(text)):
        try:
            expected = Text.from_markup(markup, emoji=False).plain
        except MarkupError:  # not markup rich draws (a closing tag with nothing open)
            continue
        assert plain(markup) == expected


def test_piped_listings_import_no_rich() -> None:
    """A piped `print_table`, and the modules of `al stat` and `al runs`, never import rich
    (tens of milliseconds of a command that takes a hundred)."""
    code = (
        "import sys, io\n"
        "from llamaherd.tables import Column, print_table\n"
        "import llamaherd.termview, llamaherd.commands.history\n"
        "print_table([Column('RUN', keep=True), 'STATE'], [('r1', '[red]failed[/]')])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout == "RUN  STATE\nr1   failed\n[]\n"

"""Tables and views the commands print, one way for every command (core's and plugins').

One header style (upper-case names, bold in a terminal). In a terminal a table fits the width:
a cell too long is cut with an ellipsis, never folded onto a second line, except in columns
marked ``keep`` (ids a person copies), which are never shortened. Piped into another program
(``al runs | grep error``) a table has one record per line whatever its length, no colours and
no trailing spaces, so scripts can split it on runs of spaces.

A view is a ``Sheet`` (a table not drawn yet) or a line of console markup, or a list of both:
rich draws it in a terminal; piped, it is written as the same text without importing rich
(tens of milliseconds of a short command).

    from llamaherd.api import Column, print_table

    print_table([Column("RUN", keep=True), "AGENT", Column("COST", justify="right")], rows)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Literal, TypeAlias

from llamaherd.markup import plain

if TYPE_CHECKING:  # rich is imported only to draw in a terminal: piped output never needs it
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

# Wide enough for any record: a piped table is never folded.
PIPE_WIDTH = 100_000
GUTTER = "  "  # between two columns, as rich draws a table without a box


@dataclass(frozen=True)
class Column:
    """A column: its header (shown upper-case), alignment, and ``keep`` (never shortened in a
    terminal: ids and names a person copies)."""

    header: str
    justify: Literal["left", "right", "center"] = "left"
    keep: bool = False
    footer: str = ""


@dataclass(frozen=True)
class Sheet:
    """A table not drawn yet (cells: text, markup strings or ``rich.text.Text``): ``show``
    draws it with rich in a terminal and as plain text when piped."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]
    title: str | None = None

    @classmethod
    def of(
        cls,
        columns: Sequence[Column | str],
        rows: Iterable[Sequence[Any]],
        title: str | None = None,
    ) -> Sheet:
        specs = tuple(Column(c) if isinstance(c, str) else c for c in columns)
        return cls(specs, tuple(tuple(row) for row in rows), title)


# What ``show`` prints: a sheet, a line of markup, or several of them one below the other.
Part: TypeAlias = Sheet | str
View: TypeAlias = Part | Sequence[Part]


def rich_table(sheet: Sheet) -> Table:
    """``sheet`` as a rich table: headers bold, fitted to the terminal's width."""
    from rich.table import Table

    cells = [[_one_line(cell) for cell in row] for row in sheet.rows]
    found = Table(
        box=None,
        header_style="bold",
        pad_edge=False,
        title=sheet.title,
        title_justify="left",
        title_style="bold",
        show_footer=any(c.footer for c in sheet.columns),
    )
    for i, spec in enumerate(sheet.columns):
        # A kept column is never shrunk; the others shrink (widest first) and their cells are
        # cut with an ellipsis (each cell is a no-wrap Text), never folded onto a second line.
        found.add_column(
            _cut(spec.header.upper()),
            footer=spec.footer,
            justify=spec.justify,
            no_wrap=spec.keep,
            min_width=max((row[i].cell_len for row in cells), default=0) if spec.keep else None,
        )
    for row in cells:
        found.add_row(*row)
    return found


def _cut(text: str) -> Text:
    from rich.text import Text

    return Text(text, no_wrap=True, overflow="ellipsis")


def _one_line(cell: Any) -> Text:
    """A cell as a Text on one line (a newline in it would split its record), cut with an
    ellipsis when its column is too narrow; a string cell is markup."""
    from rich.text import Text

    if isinstance(cell, Text):
        found = cell.copy()
    else:
        found = Text.from_markup("" if cell is None else str(cell), emoji=False)
    if "\n" in found.plain:
        found.plain = found.plain.replace("\n", " ")
    if "\t" in found.plain:  # measured as drawn: rich measures a tab as one cell
        found.expand_tabs(8)
    found.no_wrap, found.overflow = True, "ellipsis"
    return found


def show(view: View | RenderableType, *, file: IO[str] | None = None) -> None:
    """Print ``view`` (a ``Sheet``, markup lines, a list of both, or any rich renderable) to
    stdout: as drawn in a terminal; piped, one record per line, without colours or trailing
    spaces (and, for a sheet or markup, without importing rich)."""
    stream = file or sys.stdout
    if not is_terminal(stream) and _is_view(view):
        parts = [view] if isinstance(view, (Sheet, str)) else view
        stream.write("".join(line + "\n" for part in parts for line in plain_lines(part)))
        stream.flush()
        return
    _show_rich(to_rich(view), stream)


def _is_view(view: object) -> bool:
    if isinstance(view, (Sheet, str)):
        return True
    return isinstance(view, (list, tuple)) and all(isinstance(p, (Sheet, str)) for p in view)


def to_rich(view: View | RenderableType) -> RenderableType:
    """``view`` as one rich renderable (a rich renderable is itself)."""
    if isinstance(view, Sheet):
        return rich_table(view)
    if isinstance(view, str):  # markup, with no ":name:" read as an emoji (as in a cell)
        from rich.text import Text

        return Text.from_markup(view, emoji=False)
    if isinstance(view, (list, tuple)):
        from rich.console import Group

        return Group(*(to_rich(part) for part in view))
    return view


def _show_rich(renderable: RenderableType, stream: IO[str]) -> None:
    from rich.console import Console

    console = Console(file=stream, highlight=False, soft_wrap=True)
    if console.is_terminal:
        console.print(renderable)
        return
    wide = Console(width=PIPE_WIDTH, highlight=False, soft_wrap=True, color_system=None)
    with wide.capture() as captured:
        wide.print(renderable)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    stream.write("".join(line + "\n" for line in lines))
    stream.flush()


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` takes a drawing (colours, a table fitted to a width): a terminal, or
    what ``TTY_COMPATIBLE``/``FORCE_COLOR`` say, as rich decides it."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def plain_lines(part: Part) -> list[str]:
    """A sheet or a line of markup as the lines it prints piped: cells in columns two spaces
    apart (as rich draws them), no trailing spaces."""
    if isinstance(part, str):
        return [line.rstrip() for line in plain(part).split("\n")]
    columns = part.columns
    grid = [[c.header.upper() for c in columns], *([_cell_text(c) for c in r] for r in part.rows)]
    if any(c.footer for c in columns):
        grid.append([plain(c.footer) for c in columns])
    widths = [max(_width(row[i]) for row in grid) for i in range(len(columns))]
    lines = [plain(part.title)] if part.title else []
    for row in grid:
        cells = (_justified(t, w, c.justify) for t, w, c in zip(row, widths, columns, strict=True))
        lines.append(GUTTER.join(cells).rstrip())
    return lines


def _cell_text(cell: Any) -> str:
    """A cell's text on one line (a string cell is markup; ``str`` of a rich Text is its text)."""
    text = "" if cell is None else plain(cell) if isinstance(cell, str) else str(cell)
    return _tabs_expanded(text.replace("\n", " "))


def _tabs_expanded(text: str, size: int = 8) -> str:
    """Each tab as the spaces to the next stop, counted in terminal cells (as rich does)."""
    *before, last = text.split("\t")
    found, column = [], 0
    for piece in before:
        column += _width(piece)
        pad = size - column % size
        found.append(piece + " " * pad)
        column += pad
    return "".join(found) + last


def _width(text: str) -> int:
    """Terminal cells ``text`` takes, as rich counts them (wide, combining and zero-width
    characters): its table is read only for text that is not ASCII (a few milliseconds)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _justified(text: str, width: int, justify: str) -> str:
    if justify == "left":
        return text + " " * (width - _width(text))
    text = text.rstrip()  # as rich does: trailing spaces would shift the cell off its edge
    excess = width - _width(text)
    if justify == "right":
        return " " * excess + text
    return " " * (excess // 2) + text + " " * (excess - excess // 2)


def print_table(
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    file: IO[str] | None = None,
) -> None:
    """``show(Sheet.of(columns, rows, title))``: the one way commands print a table."""
    show(Sheet.of(columns, rows, title), file=file)

"""Tables and views the commands print, one way for every command (core's and plugins').

One header style (upper-case names, bold in a terminal). In a terminal a table fits the width:
a cell too long is cut with an ellipsis, never folded onto a second line, except in columns
marked ``keep`` (ids a person copies), which are never shortened. Piped into another program
(``al runs | grep error``) a table has one record per line whatever its length, no colours and
no trailing spaces, so scripts can split it on runs of spaces.

    from llamaherd.api import Column, print_table

    print_table([Column("RUN", keep=True), "AGENT", Column("COST", justify="right")], rows)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

# Wide enough for any record: a piped table is never folded.
PIPE_WIDTH = 100_000


@dataclass(frozen=True)
class Column:
    """A column: its header (shown upper-case), alignment, and ``keep`` (never shortened in a
    terminal: ids and names a person copies)."""

    header: str
    justify: Literal["left", "right", "center"] = "left"
    keep: bool = False
    footer: str = ""


def table(
    columns: Sequence[Column | str], rows: Iterable[Sequence[Any]], *, title: str | None = None
) -> Table:
    """A table of ``rows`` (cells: text, rich markup strings or ``rich.text.Text``); print it
    with ``show`` (or put it in a larger view)."""
    specs = [Column(c) if isinstance(c, str) else c for c in columns]
    cells = [[_one_line(cell) for cell in row] for row in rows]
    found = Table(
        box=None,
        header_style="bold",
        pad_edge=False,
        title=title,
        title_justify="left",
        title_style="bold",
        show_footer=any(c.footer for c in specs),
    )
    for i, spec in enumerate(specs):
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
    return Text(text, no_wrap=True, overflow="ellipsis")


def _one_line(cell: Any) -> Text:
    """A cell as a Text on one line (a newline in it would split its record), cut with an
    ellipsis when its column is too narrow; a string cell is rich markup."""
    if isinstance(cell, Text):
        found = cell.copy()
    else:
        found = Text.from_markup("" if cell is None else str(cell))
    if "\n" in found.plain:
        found.plain = found.plain.replace("\n", " ")
    found.no_wrap, found.overflow = True, "ellipsis"
    return found


def show(renderable: RenderableType, *, file: IO[str] | None = None) -> None:
    """Print ``renderable`` (a ``table``, or a view holding some) to stdout: as drawn in a
    terminal; piped, one record per line, without colours or trailing spaces."""
    stream = file or sys.stdout
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


def print_table(
    columns: Sequence[Column | str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    file: IO[str] | None = None,
) -> None:
    """``show(table(columns, rows))``: the one way commands print a table."""
    show(table(columns, rows, title=title), file=file)

"""Tables that never cut a value: a rich table on a terminal, plain aligned columns anywhere else.

A rich ``Table`` fits itself to the console's width, and a console that is not a terminal (a pipe, a CI
log, an Airflow task log) is 80 columns wide, so every long cell came out cut: ``NAMESPA…``,
``train-3…``. kubectl never cuts a name, and piped it prints plain columns that ``grep``, ``awk`` and
``cut`` can read. ``Grid`` holds the cells once and renders them either way: on a terminal as a rich
table at its natural width (a line longer than the terminal wraps, as kubectl's do), elsewhere as
columns separated by three spaces, without styles or trailing blanks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Cell = str | Text  # a str is shown as it is (no markup); a Text carries its style
GAP = "   "  # between plain columns, as kubectl
UNBOUNDED = 100_000  # the width a table is measured at: wide enough for any row


@dataclass
class Grid:
    """Headers and rows of cells, and an optional title line."""

    headers: tuple[str, ...]
    title: str | None = None
    rows: list[tuple[Cell, ...]] = field(default_factory=list)

    def add_row(self, *cells: Cell) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"a row of {len(cells)} cells for {len(self.headers)} columns")
        self.rows.append(cells)

    def plain(self) -> str:
        """Aligned columns of plain text, one line per row (a cell's own line breaks become spaces)."""
        lines = [list(self.headers), *([_flat(cell) for cell in row] for row in self.rows)]
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.headers))]
        text = [GAP.join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]
        return "\n".join([self.title, *text] if self.title else text)

    def rich(self) -> Table:
        """A rich table whose cells fold onto more lines where it must fit a width: never cut."""
        table = Table(box=None, header_style="bold", title=self.title, title_justify="left")
        for header in self.headers:
            table.add_column(header, overflow="fold")
        for row in self.rows:
            table.add_row(*(cell if isinstance(cell, Text) else Text(cell) for cell in row))
        return table


def show(console: Console, grid: Grid) -> None:
    """Print ``grid`` whole: a rich table on a terminal, plain columns elsewhere."""
    if not console.is_terminal:
        console.print(grid.plain(), markup=False, highlight=False, soft_wrap=True)
        return
    table = grid.rich()
    natural = Measurement.get(console, console.options.update_width(UNBOUNDED), table).maximum
    width = console.width
    console.width = max(width, natural)  # rich renders no wider than the console: widen it for this table
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def _flat(cell: Cell) -> str:
    return " ".join((cell.plain if isinstance(cell, Text) else cell).splitlines())

"""Tables for the terminal that stay readable at 80 columns and piped, whatever rich version draws them.

The layout is done here, at render time, from the console's width, with rich's ``Text`` only
(``rich.table.Table`` drops whole columns when a table is too wide, and its width and padding rules
differ between releases, 13 to 15): every column is
shown; the first (identifying) column is never wrapped or cut; a header is never broken inside a
word; the other columns wrap at spaces (a long word folds) when the line is too narrow; a
``one_line`` column (a text preview) gets the width left over, cut with "…". No box lines, so a
table costs no width beyond its cells and one gap of two spaces between columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

GAP = 2
"""Spaces between two columns."""
WORD = 12
"""A column may narrow to its longest word, but not below this (a longer word folds instead)."""
PREVIEW = 8
"""Narrowest a ``one_line`` column gets."""


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[str] = (),
          one_line: Sequence[str] = ()) -> "FittedTable":
    """A table whose columns all fit the console's width (see the module docstring).

    Args:
        columns: headers; the first names the row (method, problem, metric, ...).
        rows: cells as text (rich markup allowed).
        right: headers of right-aligned (numeric) columns.
        one_line: headers of columns cut with "…" to fit instead of folded (a text preview).
    """
    cells = [[Text.from_markup(cell) for cell in row] for row in rows]
    return FittedTable(list(columns), cells, frozenset(right), frozenset(one_line))


@dataclass
class FittedTable:
    """A rich renderable: a borderless table laid out here (``Text.wrap`` per cell), fitted to the console."""

    columns: list[str]
    rows: list[list[Text]]
    right: frozenset[str]
    one_line: frozenset[str]

    def natural_widths(self) -> list[int]:
        """Each column's width when nothing wraps: its widest cell or header."""
        return [max([Text(name).cell_len, *(row[i].cell_len for row in self.rows)])
                for i, name in enumerate(self.columns)]

    def widths(self, width: int) -> list[int]:
        """Column widths (without gaps) for a console ``width`` columns wide.

        Narrowing order: the widest column with room to spare loses a column at a time, first down
        to its longest word (and its header's), then down to 3 (headers fold too). The first column
        never narrows; when even that does not fit, the table is wider than ``width``.
        """
        natural = self.natural_widths()
        floors = [self._floor(i, natural[i]) for i in range(len(self.columns))]
        widths = [floors[i] if name in self.one_line else natural[i] for i, name in enumerate(self.columns)]
        room = width - GAP * (len(self.columns) - 1)
        for lowest in (floors, [natural[0], *(min(3, w) for w in natural[1:])]):
            while sum(widths) > room:
                slack = [(widths[i] - lowest[i], widths[i], i) for i in range(1, len(widths))
                         if widths[i] > lowest[i] and self.columns[i] not in self.one_line]
                if not slack:
                    break
                widths[max(slack, key=lambda s: (s[1], s[0]))[2]] -= 1
        spare = room - sum(widths)
        for i, name in enumerate(self.columns):  # previews take what is left
            if name in self.one_line and spare > 0:
                grow = min(spare, natural[i] - widths[i])
                widths[i] += grow
                spare -= grow
        return widths

    def _floor(self, index: int, natural: int) -> int:
        """The narrowest a column gets before headers would break: whole words of header and cells."""
        if index == 0:
            return natural
        header = max(Text(word).cell_len for word in self.columns[index].split() or [""])
        if self.columns[index] in self.one_line:
            return min(natural, max(PREVIEW, header))
        words = max([0, *(Text(word).cell_len for row in self.rows for word in row[index].plain.split())])
        return min(natural, max(header, min(words, WORD)))

    def lines(self, console: Console, width: int) -> list[Text]:
        """The table as lines of text for a console ``width`` columns wide (header first, bold)."""
        widths = self.widths(width)
        out = []
        for cells in ([Text(name, style="bold") for name in self.columns], *self.rows):
            wrapped = [self._wrap(console, i, cell, size) for i, (cell, size) in enumerate(zip(cells, widths))]
            for k in range(max(len(lines) for lines in wrapped)):
                line = Text()
                for i, (lines, size) in enumerate(zip(wrapped, widths)):
                    piece = lines[k].copy() if k < len(lines) else Text()
                    pad = " " * max(0, size - piece.cell_len)
                    line.append_text(Text(pad) + piece if self.columns[i] in self.right else piece + Text(pad))
                    line.append(" " * GAP if i < len(widths) - 1 else "")
                line.rstrip()
                out.append(line)
        return out

    def _wrap(self, console: Console, index: int, cell: Text, size: int) -> list[Text]:
        """One cell as lines at most ``size`` wide: the first column whole, previews cut, the rest wrapped."""
        if index == 0:
            return [cell]
        if self.columns[index] in self.one_line:
            cut = cell.copy()
            cut.truncate(size, overflow="ellipsis")
            return [cut]
        return list(cell.wrap(console, size, overflow="fold")) or [Text()]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines(console, options.max_width):
            line.no_wrap = True
            line.end = "\n"
            yield line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        natural = self.natural_widths()
        return Measurement(0, sum(natural) + GAP * (len(natural) - 1))

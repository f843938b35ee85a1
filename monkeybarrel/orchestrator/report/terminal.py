"""Tables for the terminal that stay readable at 80 columns and piped.

The first (identifying) column is never wrapped or cut: it keeps its full width and the other
columns fold. No box lines, so a table costs no width beyond its cells.
"""

from __future__ import annotations

from typing import Sequence

from rich.table import Table
from rich.text import Text


def table(columns: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[str] = (),
          one_line: Sequence[str] = ()) -> Table:
    """A table whose first column is never wrapped or cut.

    Args:
        columns: headers; the first names the row (method, problem, metric, ...).
        rows: cells as text (rich markup allowed).
        right: headers of right-aligned (numeric) columns.
        one_line: headers of columns cut with "…" to fit instead of folded (a text preview).
    """
    out = Table(pad_edge=False, box=None, header_style="bold", show_edge=False)
    widest = max([len(columns[0]), *(len(Text.from_markup(row[0]).plain) for row in rows)]) if columns else 0
    for i, name in enumerate(columns):
        if i == 0:
            out.add_column(name, no_wrap=True, min_width=widest)
        elif name in one_line:
            out.add_column(name, no_wrap=True, overflow="ellipsis", ratio=1, min_width=8)
        else:
            out.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        out.add_row(*row)
    return out

"""What a recipe is, and how its side-by-side table is printed and written.

A recipe (``catalog.Recipe``) = released data (hub id, or ``--data`` for a local copy in the released
schema) + a loader + our pipeline + the published numbers. ``Recipe.run(data, out)`` returns ``Comparison``
rows; the CLI prints them and ``write_outputs`` writes ``report.md`` and ``comparison.json`` under ``out``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console

from ...orchestrator.report.terminal import table


class RecipeDataError(ValueError):
    """The data given to a recipe does not have the released schema (message names file and field)."""


@dataclass(frozen=True)
class Published:
    """One number from a paper.

    Attributes:
        value: the number as printed (percent for accuracies and coverage).
        source: where it is printed: paper + table/figure/section, e.g. ``"arXiv 2407.21787, Fig. 5"``.
        note: caveats (a number read off a plot, an inconsistency between tables, ...).
    """

    value: float
    source: str
    note: str = ""


@dataclass
class Row:
    """One line of the side-by-side table: what was measured, the paper's value and ours."""

    group: str
    metric: str
    ours: float | None
    paper: Published | None = None
    unit: str = "%"
    digits: int = 1

    @property
    def delta(self) -> float | None:
        if self.paper is None or self.ours is None or math.isnan(self.ours):
            return None
        return self.ours - self.paper.value


@dataclass
class Comparison:
    """Everything a recipe produced: rows, notes, figures and timings (seconds)."""

    recipe: str
    title: str
    data: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    extra_markdown: str = ""
    wide: bool = False
    """Print one line per group with a column per metric (``ours (paper, delta)``) instead of one line per number."""


def _fmt(value: float | None, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.{digits}f}"


def _delta(row: Row) -> str:
    delta = row.delta
    return "–" if delta is None else f"{delta:+.{row.digits}f}"


def _cell(row: Row) -> str:
    ours = _fmt(row.ours, row.digits)
    return ours if row.paper is None else f"{ours} ({_fmt(row.paper.value, row.digits)}, {_delta(row)})"


def _metric(row: Row) -> str:
    return row.metric + ("" if row.unit in ("", "%") else f" ({row.unit})") + (" %" if row.unit == "%" else "")


def _wide(result: Comparison) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, one line per group, and the sources of the paper numbers."""
    metrics = list(dict.fromkeys(_metric(r) for r in result.rows))
    groups = list(dict.fromkeys(r.group for r in result.rows))
    cells = {(r.group, _metric(r)): _cell(r) for r in result.rows}
    sources = list(dict.fromkeys(r.paper.source + (f" ({r.paper.note})" if r.paper.note else "")
                                 for r in result.rows if r.paper))
    lines = [[group] + [cells.get((group, m), "") for m in metrics] for group in groups]
    return ["", *metrics], lines, sources


def _long(result: Comparison) -> tuple[list[str], list[list[str]]]:
    lines = [[row.group, _metric(row), _fmt(row.paper.value if row.paper else None, row.digits),
              _fmt(row.ours, row.digits), _delta(row),
              (row.paper.source + (f"; {row.paper.note}" if row.paper.note else "")) if row.paper else ""]
             for row in result.rows]
    return ["", "metric", "paper", "ours", "delta", "source"], lines


def print_comparison(result: Comparison, console: Console | None = None) -> None:
    """The side-by-side table on the terminal (the group column never cut; the others fold at 80 columns)."""
    console = console or Console(highlight=False)
    header, lines = _wide(result)[:2] if result.wide else _long(result)
    console.print(f"[bold]{result.title}[/bold]", soft_wrap=True)
    console.print(f"[dim]{result.data}[/dim]", soft_wrap=True)
    header = ["group" if not header[0] else header[0], *header[1:]]
    numeric = [h for i, h in enumerate(header) if i and h not in ("metric", "source")]
    console.print(table(header, [[_escape(c) for c in line] for line in lines], right=numeric))
    if result.wide:
        console.print("[dim]cells: ours (paper, ours - paper); sources: " + "; ".join(_wide(result)[2]) + "[/dim]")
    for note in result.notes:
        console.print(f"[dim]- {_escape(note)}[/dim]")
    if result.timings:
        console.print("time (s): " + ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items()))


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def render_markdown(result: Comparison) -> str:
    """``report.md``: the table (paper, ours, delta, source), notes, figures, timings."""
    lines = [f"# {result.title}", "", f"Data: {result.data}", ""]
    header, rows = _wide(result)[:2] if result.wide else _long(result)
    lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 or h in ("metric", "source") else "---:"
                                                              for i, h in enumerate(header)) + "|"]
    lines += ["| " + " | ".join(line) + " |" for line in rows]
    lines.append("")
    if result.wide:
        lines += ["Cells: ours (paper, ours - paper); a bare number: the paper does not report it. Sources: "
                  + "; ".join(_wide(result)[2]) + ".", ""]
    else:
        lines += ["Percent unless a unit is given; delta = ours - paper; – = not reported.", ""]
    for note in result.notes:
        lines.append(f"- {note}")
    if result.notes:
        lines.append("")
    for figure in result.figures:
        lines += [f"![{Path(figure).stem}]({Path(figure).name})", ""]
    if result.extra_markdown:
        lines += [result.extra_markdown.rstrip(), ""]
    if result.timings:
        lines += ["Time (s): " + ", ".join(f"{k} {v:.2f}" for k, v in result.timings.items()), ""]
    return "\n".join(lines)


def write_outputs(result: Comparison, out: Path) -> Path:
    """Write ``report.md`` and ``comparison.json`` under ``out``; returns the report path."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.md"
    report.write_text(render_markdown(result))
    payload = asdict(result)
    for row, raw in zip(result.rows, payload["rows"]):
        raw["delta"] = row.delta
    (out / "comparison.json").write_text(json.dumps(payload, indent=2, default=float))
    return report

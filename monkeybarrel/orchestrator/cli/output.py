"""Terminal output shared by the subcommands: a console, tables that fit 80 columns, the run summary.

A table's first (identifying) column is never cut: it keeps its full width and the other columns
wrap. Piped output has no colour and the width of ``$COLUMNS`` (80 when unset).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console

from ..report.terminal import table

@lru_cache(maxsize=1)
def console() -> Console:
    """The shared console (created on first use)."""
    return Console(highlight=False)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None,
                right: Sequence[str] = ()) -> None:
    """``title`` on its own line (never wrapped into the table's width), then ``table(...)``."""
    if title:
        console().print(title, style="bold", markup=False, soft_wrap=True)
    console().print(table(columns, rows, right))


def print_lines(lines: Sequence[str]) -> None:
    """Plain lines (no markup, never re-wrapped: a long path stays one line)."""
    out = console()
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)


def print_summary(metrics: dict[str, Any], directory: Path) -> None:
    """After ``run``, ``demo`` and ``report``: accuracy against k, each selector's accuracy, the verifiers."""
    from ..report.markdown import pct

    out = console()
    n_problems, n_candidates = metrics["n_problems"], metrics["n_candidates"]
    spp = metrics.get("samples_per_problem", {})
    size = f"{spp.get('max')}" if spp.get("min") == spp.get("max") else f"{spp.get('min')}–{spp.get('max')}"
    print_lines([f"{n_problems} problems x {size} samples ({n_candidates} candidates); mean sample accuracy "
                 f"{pct(metrics.get('sample_accuracy'))} %", ""])
    curves = {name: curve for name, curve in metrics.get("accuracy_vs_k", {}).items() if name != "majority"}
    columns = ["k", "coverage", "majority", *curves]
    rows = [[str(k), pct(metrics["coverage"].get(str(k))), pct(metrics["majority"].get(str(k))),
             *(pct(curve.get(str(k))) for curve in curves.values())] for k in metrics["ks"]]
    print_table(columns, rows, "accuracy (%) against k samples per problem", right=columns)
    out.print()
    selection = metrics.get("selection", {})
    rows = [[name, pct(info["accuracy"], info.get("ci95")), "yes" if info["uses_labels"] else "no"]
            for name, info in selection.items()]
    print_table(["method", "accuracy % [95% interval]", "uses labels"], rows,
                f"selection with all samples (k = {max(metrics['ks']) if metrics['ks'] else '–'})",
                right=["accuracy % [95% interval]"])
    notes = {name: len(info["notes"]) for name, info in selection.items() if info.get("notes")}
    if notes:
        print_lines(["notes in report.md: " + ", ".join(f"{name} ({count})" for name, count in notes.items())])
    if metrics.get("verifiers"):
        out.print()
        rows = [[name, pct(info.get("top1_accuracy")), "–" if info.get("auroc") is None else f"{info['auroc']:.2f}",
                 pct(info.get("failed"))] for name, info in metrics["verifiers"].items()]
        print_table(["verifier", "top-1 %", "AUROC", "failed %"], rows, "verifiers against the labels (evaluation only)",
                    right=["top-1 %", "AUROC", "failed %"])
    if metrics.get("labelled_candidates", 1) == 0:
        out.print("[yellow]no labels stored: accuracies are unknown (–), not 0 %[/]")
    out.print()
    print_lines([f"report: {directory / 'report.md'}", f"page:   {directory / 'report.html'}"])

"""``monkeybarrel show DIR [--problem ID]``: look at stored results in the terminal.

Without ``--problem``: one row per problem (samples, correct samples, each selector's pick and
whether it is right). With it: the problem, its reference, and every candidate with its answer,
label, verifier scores and the selectors that picked it, and where the verifiers' per-problem records
(generated tests, vote matrices, transcripts) are stored.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .drilldown import Drilldown
from ..experiment import Experiment
from ..store.experiment_store import StoreError


def _mark(correct) -> str:
    return "–" if correct is None else ("[green]✓[/]" if correct else "[red]✗[/]")


def show(directory, problem_id: str | None = None, limit: int = 50, full_text: bool = False,
         console: Console | None = None) -> None:
    """Print the per-problem table (first ``limit`` problems) or one problem's candidates."""
    console = console or Console()
    experiment = Experiment(directory)
    view = Drilldown.load(experiment)
    methods = list(view.picks)
    if problem_id is None:
        ids = view.problem_ids()
        table = Table(title=f"{directory}: {len(ids)} problems" + (f" (first {limit}; --limit to see more)"
                                                                   if len(ids) > limit else ""))
        for column in ("problem", "samples", "correct", "reference", *methods):
            table.add_column(column, justify="right" if column in ("samples", "correct") else "left",
                             no_wrap=column == "problem")
        for pid in ids[:limit]:
            info = view.summary(pid)
            table.add_row(pid, str(info["n"]), "–" if info["n_correct"] is None else str(info["n_correct"]),
                          str(info["reference"]),
                          *(f"{info['picks'][m]['answer']} {_mark(info['picks'][m]['correct'])}" for m in methods))
        console.print(table)
        if not methods:
            console.print("no selections stored yet: `monkeybarrel report DIR` writes them")
        return
    if problem_id not in view.rows_of:
        known = view.problem_ids()
        raise StoreError(f"{directory}: no problem {problem_id!r} with candidates; known ids start "
                         f"{known[:5]}{' …' if len(known) > 5 else ''}")
    info = view.summary(problem_id)
    console.print(f"[bold]{problem_id}[/]  reference: {info['reference']}  samples: {info['n']}  "
                  f"correct: {'–' if info['n_correct'] is None else info['n_correct']}", highlight=False)
    console.print(info["prompt"], highlight=False, markup=False)
    table = Table(show_lines=True)
    for column in ("generator", "#", "answer", "ok", *view.verifiers, "finish", "picked by", "text"):
        table.add_column(column, overflow="fold")
    for row in view.candidate_rows(problem_id, max_text=None if full_text else 300):
        table.add_row(row["generator_id"], str(row["sample_index"]), str(row["answer"]), _mark(row["correct"]),
                      *("–" if row["scores"][v] is None else f"{row['scores'][v]:.3g}" for v in view.verifiers),
                      row["finish_reason"] or "", ", ".join(row["picked_by"]),
                      (row["text"] or row["error"] or "").replace("[", r"\["))
    console.print(table)
    for verifier in view.verifiers:  # what verifiers recorded for this problem (tests, vote matrices, transcripts)
        path = experiment.store.artifact_path(verifier, problem_id)
        if path.is_file():
            console.print(f"{verifier} record: {path}", highlight=False, markup=False)

"""``monkeybarrel show DIR [--problem ID]``: look at stored results in the terminal.

Without ``--problem``: one row per problem (samples, correct samples, reference, each selector's pick
and whether it is right). With it: the problem and its reference, then one line per candidate (index,
answer, label, verifier scores, the selectors that picked it, the start of its text), and where the
verifiers' per-problem records (generated tests, vote matrices, transcripts) are stored; ``--full``
adds every text in full below. Both stay readable at 80 columns and piped: the identifying column is
never cut, selectors are abbreviated by a legend, a text preview is cut to the line.
"""

from __future__ import annotations

from rich.console import Console

from ..experiment import Experiment
from ..store.experiment_store import StoreError
from .drilldown import Drilldown
from .terminal import table


def _mark(correct) -> str:
    return "–" if correct is None else ("[green]✓[/]" if correct else "[red]✗[/]")


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def _answer(answer) -> str:
    """An answer as a cell: "–" for none (a pick or candidate without a parseable answer)."""
    return "–" if answer is None else _escape(str(answer))


def abbreviations(methods: list[str]) -> dict[str, str]:
    """A short unique code per method: ``M`` majority, ``W`` weaver, ``R`` random (pass@1), ``O`` oracle, ..."""
    codes: dict[str, str] = {}
    for method in methods:
        letters = [c for c in method.upper() if c.isalnum()] or ["X"]
        code = letters[0]
        for extra in letters[1:] + [str(i) for i in range(2, 100)]:
            if code not in codes.values():
                break
            code = letters[0] + extra
        codes[method] = code
    return codes


def _pick(pick: dict) -> str:
    """A selector's pick as a cell: its answer and ✓/✗, "–" for a pick without an answer, "·" for no pick."""
    return "·" if pick["row"] < 0 else f"{_answer(pick['answer'])} {_mark(pick['correct'])}"


def show(directory, problem_id: str | None = None, limit: int = 50, full_text: bool = False,
         console: Console | None = None) -> None:
    """Print the per-problem table (first ``limit`` problems) or one problem's candidates."""
    console = console or Console(highlight=False)
    experiment = Experiment(directory)
    view = Drilldown.load(experiment)
    methods = list(view.picks)
    if problem_id is None:
        ids = view.problem_ids()
        console.print(f"{directory}: {len(ids)} problems" + (f" (first {limit}; --limit to see more)"
                                                             if len(ids) > limit else ""), soft_wrap=True, markup=False)
        codes = abbreviations(methods)
        rows = []
        for pid in ids[:limit]:
            info = view.summary(pid)
            rows.append([_escape(pid), str(info["n"]), "–" if info["n_correct"] is None else str(info["n_correct"]),
                         _answer(info["reference"]),
                         *(_pick(info["picks"][m]) for m in methods)])
        console.print(table(["problem", "samples", "correct", "reference", *(codes[m] for m in methods)], rows,
                            right=["samples", "correct"]))
        if methods:
            console.print("picks: " + ", ".join(f"{codes[m]} = {m}" for m in methods), markup=False)
        else:
            console.print("no selections stored yet: `monkeybarrel report DIR` writes them")
        return
    if problem_id not in view.rows_of:
        known = view.problem_ids()
        raise StoreError(f"{directory}: no problem {problem_id!r} with candidates; known ids start "
                         f"{known[:5]}{' …' if len(known) > 5 else ''}")
    info = view.summary(problem_id)
    console.print(f"[bold]{_escape(problem_id)}[/]  reference {_escape(str(info['reference']))}  samples {info['n']}  "
                  f"correct {'–' if info['n_correct'] is None else info['n_correct']}", soft_wrap=True)
    console.print(info["prompt"], markup=False)
    candidates = view.candidate_rows(problem_id, max_text=None)
    codes = abbreviations(methods)
    several = len({row["generator_id"] for row in candidates}) > 1
    columns = [*(["generator"] if several else []), "#", "answer", "ok", *view.verifiers, "finish", "picked", "text"]
    rows = []
    for row in candidates:
        text = " ".join((row["text"] or row["error"] or "").split())
        rows.append([*([_escape(row["generator_id"])] if several else []), str(row["sample_index"]),
                     _answer(row["answer"]), _mark(row["correct"]),
                     *("–" if row["scores"][v] is None else f"{row['scores'][v]:.3g}" for v in view.verifiers),
                     row["finish_reason"] or "", "".join(codes[m] for m in row["picked_by"]) or "·", _escape(text)])
    console.print(table(columns, rows, right=["#", *view.verifiers], one_line=["text"]))
    console.print("picked: " + ", ".join(f"{codes[m]} = {m}" for m in methods)
                  + ("" if full_text else "; --full prints every text"), markup=False)
    if full_text:
        for row in candidates:
            console.print(f"\n[bold]#{row['sample_index']}[/]" + (f" ({_escape(row['generator_id'])})" if several else ""))
            console.print(row["text"] or row["error"] or "", markup=False)
    for verifier in view.verifiers:  # what verifiers recorded for this problem (tests, vote matrices, transcripts)
        path = experiment.store.artifact_path(verifier, problem_id)
        if path.is_file():
            console.print(f"{verifier} record: {path}", markup=False, soft_wrap=True)

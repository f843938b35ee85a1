"""What final answers tell a label model without labels: answer items, share cells, agreement strata.

All candidates of a problem that give the same final answer are right or wrong together, so Weaver's
label belongs to the *answer*: its candidates' votes are repeated evidence about one label (an item).
How large a share of the problem's samples an answer has is the majority evidence (its cell), and how
much a problem's samples agree (its largest answer share) is a label-free handle on its difficulty
(its stratum): easy problems agree, hard ones scatter or gather on a favourite wrong answer.

Cells: 0 = the candidate has no answer (its own item), 1 = the problem's only candidate, then for an
answer of a problem with several candidates ``2 + RANKS * share_bin + rank`` with share bins ``SHARE_EDGES``
and rank 0 (not the most frequent), 1 (most frequent by fewer than ``CLEAR_LEAD`` candidates, or tied)
or 2 (most frequent by at least ``CLEAR_LEAD``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.groups import factorize

SHARE_EDGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Bin edges of an answer's share of its problem's candidates (10 % bins; docs/weaver.md compares 20 %)."""
RANKS = 3
"""An answer's rank in its problem: 0 other, 1 most frequent by fewer than ``CLEAR_LEAD`` candidates (or
tied), 2 most frequent by at least ``CLEAR_LEAD``."""
CLEAR_LEAD = 2
N_CELLS = 2 + RANKS * (len(SHARE_EDGES) + 1)
CELL_NO_ANSWER, CELL_ALONE = 0, 1


def cell_name(cell: int) -> str:
    """Plain words for a cell, e.g. ``"most frequent answer, 40-60 % of the samples"``."""
    if cell == CELL_NO_ANSWER:
        return "no answer"
    if cell == CELL_ALONE:
        return "the problem's only sample"
    share_bin, rank = divmod(cell - 2, RANKS)
    edges = (0.0, *SHARE_EDGES, 1.0)
    span = f"{100 * edges[share_bin]:.0f}-{100 * edges[share_bin + 1]:.0f} % of the samples"
    kind = ("other answer", "most frequent answer (narrowly)", f"most frequent answer (by {CLEAR_LEAD}+)")[rank]
    return f"{kind}, {span}"


def is_most_frequent(cells: np.ndarray) -> np.ndarray:
    """``[k]`` bool: cells of a problem's most frequent answer (the only sample's included)."""
    cells = np.asarray(cells)
    return (cells == CELL_ALONE) | ((cells >= 2) & ((cells - 2) % RANKS > 0))


@dataclass
class AnswerStructure:
    """Items, cells and agreement of candidates with final answers.

    Attributes:
        items: ``[n]`` int item of each candidate (one per (problem, answer); a candidate without an
            answer is its own item).
        cells: ``[n]`` int cell of the candidate's item.
        agreement: ``[n_problems]`` largest answer share of each problem (0 when none answered).
        problems: ``[n]`` int problem index of each candidate; ``sizes``: ``[n_problems]`` candidates.
    """

    items: np.ndarray
    cells: np.ndarray
    agreement: np.ndarray
    problems: np.ndarray
    sizes: np.ndarray

    def subset(self, rows: np.ndarray) -> "AnswerStructure":
        """The candidates at ``rows`` (items, cells and problems kept; per-problem arrays unchanged)."""
        return AnswerStructure(items=self.items[rows], cells=self.cells[rows], agreement=self.agreement,
                               problems=self.problems[rows], sizes=self.sizes)

    def sample(self, limit: int, seed: int = 0) -> np.ndarray | None:
        """Sorted rows of a seeded random set of whole problems with about ``limit`` candidates in all
        (None when there are no more than ``limit``)."""
        if self.items.size <= limit:
            return None
        order = np.random.default_rng(seed).permutation(self.sizes.size)
        chosen = order[: np.searchsorted(np.cumsum(self.sizes[order]), limit) + 1]
        return np.flatnonzero(np.isin(self.problems, chosen))

    def strata(self, edges: np.ndarray) -> np.ndarray:
        """``[n]`` stratum of each candidate: its problem's agreement against ascending ``edges``
        (problems with one candidate join the most agreeing stratum)."""
        agreement = np.where(self.sizes > 1, self.agreement, np.inf)
        return np.searchsorted(np.asarray(edges, dtype=np.float64), agreement, side="right")[self.problems]


def answer_structure(groups: np.ndarray, answers: np.ndarray) -> AnswerStructure:
    """Items, cells and agreement from ``groups [n]`` (problem of each candidate, any hashable codes)
    and ``answers [n]`` (int answer code, equal codes = equivalent answers, -1 = none)."""
    groups = np.asarray(groups)
    answers = np.asarray(answers, dtype=np.int64)
    n = answers.size
    problems, _ = factorize(groups) if n else (np.zeros(0, np.int64), None)
    n_problems = int(problems.max(initial=-1)) + 1
    sizes = np.bincount(problems, minlength=n_problems)
    has = answers >= 0
    # one item per (problem, answer); candidates without an answer get items of their own
    span = int(answers.max(initial=0)) + 1
    key = np.where(has, problems * span + answers, -1 - np.arange(n))
    _, items = np.unique(key, return_inverse=True)
    items = items.reshape(-1)
    count = np.bincount(items, minlength=int(items.max(initial=-1)) + 1)[items]
    share = count / np.maximum(sizes[problems], 1)
    top = np.zeros(n_problems)
    np.maximum.at(top, problems[has], count[has])
    modal = has & (count == top[problems])
    second = np.zeros(n_problems)  # the runner-up's count (the top's own count again when tied)
    runner = has & ~modal
    np.maximum.at(second, problems[runner], count[runner])
    modal_items = np.bincount(problems[modal], weights=1.0 / np.maximum(count[modal], 1), minlength=n_problems)
    second = np.where(modal_items > 1.5, top, second)  # two or more most frequent answers: a tie
    rank = np.where(modal, np.where(top[problems] - second[problems] >= CLEAR_LEAD, 2, 1), 0)
    share_bin = np.searchsorted(np.asarray(SHARE_EDGES), share, side="right")
    cells = np.where(~has, CELL_NO_ANSWER, np.where(sizes[problems] == 1, CELL_ALONE, 2 + RANKS * share_bin + rank))
    agreement = top / np.maximum(sizes, 1)
    return AnswerStructure(items=items, cells=cells.astype(np.int64), agreement=agreement, problems=problems,
                           sizes=sizes)


def agreement_edges(structure: AnswerStructure, n_strata: int, min_problems: int = 40) -> np.ndarray:
    """Ascending agreement cut points giving up to ``n_strata`` strata of about equal numbers of problems
    with several candidates (fewer when a stratum would hold fewer than ``min_problems``)."""
    several = structure.agreement[structure.sizes > 1]
    n_strata = int(min(n_strata, several.size // max(min_problems, 1)))
    if n_strata < 2:
        return np.zeros(0)
    edges = np.quantile(several, np.arange(1, n_strata) / n_strata)
    edges = np.unique(edges)
    return edges[(edges > several.min()) & (edges <= several.max())]

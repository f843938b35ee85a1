"""Scoring every candidate with a fitted label model, in one pass over the bins.

A candidate's own evidence is the sum over the kept verifiers of the log-likelihood ratio of its bin
(``tables [S, B + 1, m]``, the last bin = abstain = 0), read column by column so candidates with equal
bins in one stratum get bitwise-equal sums. With final answers, an answer's evidence is the sum of its
candidates' (in a fixed order, so answers with equal evidence tie exactly) plus its share cell's; a
candidate without an answer is graded wrong and ranks after every answered one.
"""

from __future__ import annotations

import numpy as np

from .answers import CELL_NO_ANSWER, AnswerStructure

NO_ANSWER_LOG_ODDS = -1000.0
"""With final answers, a candidate without one is graded wrong: its log-odds are its own votes' plus this, so it
ranks after every answered candidate (and only its own votes order it among the unanswered)."""


def abstain_tables(weights: np.ndarray) -> np.ndarray:
    """``[S, B + 1, m]`` the log-likelihood ratio tables ``weights [S, B, m]`` with a zero abstain bin."""
    return np.concatenate([weights, np.zeros((weights.shape[0], 1, weights.shape[2]))], axis=1)


def row_evidence(codes: np.ndarray, tables: np.ndarray, columns: np.ndarray, strata: np.ndarray | None) -> np.ndarray:
    """``[n]`` log-likelihood ratio of each row's bins (``codes [n, m]``, abstain = ``B``) under ``tables``
    (``[S, B + 1, m]``), summed over ``columns`` in order; ``strata`` ``[n]`` picks each row's table."""
    n = codes.shape[0]
    S, width, _ = tables.shape
    offset = 0 if strata is None or S == 1 else np.asarray(strata, dtype=np.intp) * width
    out = np.zeros(n)
    for j in columns:
        codes_j = np.minimum(codes[:, j], width - 1)  # every abstain code reads the abstain bin
        out += tables[:, :, j].ravel()[codes_j + offset]
    return out


def answer_log_odds(evidence: np.ndarray, structure: AnswerStructure, cell_llr: np.ndarray | None,
                    prior_log_odds: float) -> np.ndarray:
    """``[n]`` posterior log-odds of each candidate's answer from its candidates' ``evidence [n]``, the
    answer's share cell (``cell_llr [n_cells]``; None without the majority evidence) and the prior."""
    order = np.lexsort((evidence, structure.items))  # sum per answer in a fixed order (by value)
    items = structure.items[order]
    starts = np.flatnonzero(np.concatenate([[True], items[1:] != items[:-1]]))
    totals = np.zeros(int(structure.items.max(initial=-1)) + 1)
    if starts.size:
        totals[items[starts]] = np.add.reduceat(evidence[order], starts)
    cell = cell_llr[structure.cells] if cell_llr is not None else 0.0
    out = prior_log_odds + totals[structure.items] + cell
    unanswered = structure.cells == CELL_NO_ANSWER
    out[unanswered] = prior_log_odds + evidence[unanswered] + NO_ANSWER_LOG_ODDS
    return out

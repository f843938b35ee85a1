"""Candidate keys as integer codes: duplicates, the newest row per key, and row alignment between tables.

A candidate is keyed by (problem_id, generator_id, sample_index) (``records.CANDIDATE_KEY``). The
functions here turn the keys of one or more Arrow tables into ``int64`` codes (equal codes <=> equal
keys, comparable across the tables coded together) and answer the store's key questions with a sort
of those codes: O(n log n), vectorised, and without Arrow's query engine (``Table.group_by`` and
``Table.join`` load ``pyarrow.acero``, which imports ``pyarrow.dataset`` and pandas: 0.15 CPU s of
every ``monkeybarrel report``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .records import CANDIDATE_KEY

NO_KEY = -1
"""The code of a row with a null key part: it equals no other row's key (as in a join)."""


def key_codes(*tables: pa.Table) -> list[np.ndarray]:
    """``[n_i]`` int64 code of each row's candidate key, for each table; one coding across all of them."""
    sizes = [t.num_rows for t in tables]
    code = np.zeros(sum(sizes), dtype=np.int64)
    missing = np.zeros(code.size, dtype=bool)
    span = 1
    for name in CANDIDATE_KEY:
        column = pa.chunked_array([c for t in tables for c in t.column(name).chunks], type=tables[0].schema.field(name).type)
        missing |= column.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_integer(column.type):
            values = pc.fill_null(column, 0).to_numpy().astype(np.int64)
            low = int(values.min(initial=0))
            part, size = values - low, int(values.max(initial=0)) - low + 1
        else:
            distinct = pc.unique(column.drop_null())
            part, size = pc.fill_null(pc.index_in(column, value_set=distinct), 0).to_numpy().astype(np.int64), len(distinct)
        if span * max(size, 1) >= 2 ** 62:
            raise OverflowError(f"candidate keys take more than 2**62 codes ({name} has {size} values)")
        code = code * max(size, 1) + part
        span *= max(size, 1)
    code[missing] = NO_KEY
    return np.split(code, np.cumsum(sizes)[:-1])


def repeated_rows(codes: np.ndarray) -> np.ndarray:
    """Rows whose key occurred in an earlier row (ascending); rows with a null key part never repeat."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    repeat = np.r_[False, (ordered[1:] == ordered[:-1]) & (ordered[1:] != NO_KEY)]
    return np.sort(order[repeat])


def newest_rows(codes: np.ndarray) -> np.ndarray:
    """Row index of the last occurrence of each key, ascending (each null-key row is its own key)."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(codes, kind="stable")  # stable: within a key, rows stay in table order
    ordered = codes[order]
    last = np.r_[(ordered[1:] != ordered[:-1]) | (ordered[:-1] == NO_KEY), True]
    return np.sort(order[last])


def align_rows(target: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``[len(target)]`` the row of ``source`` with each target row's key, -1 where none (``source``: unique keys)."""
    order = np.argsort(source, kind="stable")
    ordered = source[order]
    position = np.minimum(np.searchsorted(ordered, target), max(ordered.size - 1, 0))
    found = (ordered.size > 0) & (target != NO_KEY)
    if ordered.size:
        found &= ordered[position] == target
    return np.where(found, order[position] if ordered.size else NO_KEY, NO_KEY)


def describe_key(table: pa.Table, row: int) -> str:
    """``problem_id='p1', generator_id='g', sample_index=3``: the key of one row, for messages."""
    return ", ".join(f"{name}={table.column(name)[row].as_py()!r}" for name in CANDIDATE_KEY)

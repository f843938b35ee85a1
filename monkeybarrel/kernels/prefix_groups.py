"""Which decode requests share KV blocks, and the work list of one shared-prefix decode step (numpy, CPU).

With prefix caching, the n samples of one prompt point at the same physical KV blocks for the
prompt's full blocks (vLLM hashes each full block together with its parent, so two requests that hold
the same block ``j`` hold the same blocks ``0..j``). :func:`find_shared_groups` groups a batch's
requests by the deepest run of leading blocks that at least two of them share;
:func:`plan_paged_decode` turns the groups into the work list the paged kernel
(:mod:`monkeybarrel.kernels.paged_launch`) runs:

- *prefix items* ``(group, key split, m tile)``: the ``members x G`` query rows of a group (``G`` the
  GQA group size) against a chunk of the group's shared blocks, read once for all members through
  the group leader's block table row;
- *suffix tiles* ``(request, kv head, split)``: each request's own keys ``[shared_len, seq_len)``
  through its own block table row (requests in no group have ``shared_len = 0``);
- the exact log-sum-exp merge of every partial of a row.

Everything here is plain numpy on the CPU copy of the block table (one call per decode step, shared
by all layers), so it is unit-tested without a GPU or vLLM.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

__all__ = ["SharedGroups", "PagedDecodePlan", "PlanCache", "StepShape", "find_shared_groups", "plan_paged_decode",
           "step_shape", "ITEM_FIELDS", "MAX_PREFIX_SPLITS"]

MAX_PREFIX_SPLITS = 16
"""Most chunks one group's shared keys are cut into (the prefix partial slots of every row)."""

ITEM_FIELDS = ("order_start", "flat_start", "flat_rows", "key_lo", "key_hi", "leader", "split", "pad")
"""Columns of :attr:`PagedDecodePlan.items` (int32): where the group's members start in ``order``,
the tile's first flat row ``member*G + g`` within the group, the group's flat rows, the key range
``[key_lo, key_hi)`` (token positions), the block-table row the prefix is read through, the split
index (partial slot), padding."""


@dataclasses.dataclass(frozen=True)
class SharedGroups:
    """Requests grouped by shared leading KV blocks.

    order: ``[T]`` int32 request indices, the members of each group contiguous (groups first, in
        ``starts`` order, then every request in no group).
    starts: ``[n_groups + 1]`` offsets into ``order`` of each group's members.
    shared_blocks: ``[n_groups]`` leading blocks every member of the group holds.
    shared_len: ``[T]`` int32 shared prefix tokens per request (0 outside groups).
    """

    order: np.ndarray
    starts: np.ndarray
    shared_blocks: np.ndarray
    shared_len: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.shared_blocks)

    def members(self, group: int) -> np.ndarray:
        return self.order[self.starts[group]:self.starts[group + 1]]

    def saved_tokens(self, block_size: int) -> int:
        """KV tokens per layer and head that are read once instead of once per member."""
        sizes = np.diff(self.starts)
        return int(((sizes - 1) * self.shared_blocks).sum()) * block_size


def _common_blocks(rows: np.ndarray) -> int:
    """Leading columns on which every row of ``rows [k, w]`` agrees."""
    same = (rows == rows[:1]).all(axis=0)
    return int(same.argmin()) if not same.all() else rows.shape[1]


def find_shared_groups(block_table: np.ndarray, seq_lens: np.ndarray, block_size: int) -> SharedGroups:
    """Group the requests of one decode step by the KV blocks they share.

    Args:
        block_table: ``[T, W]`` int physical block ids per request (row ``t`` = request ``t``).
        seq_lens: ``[T]`` int tokens in each request's KV, the current token included.
        block_size: tokens per block.

    Only full blocks before the block of the current token can be shared
    (``usable = (seq_len - 1) // block_size``); padded rows (``seq_len = 0``) share nothing. A set of
    requests that agree on their first ``d`` blocks is split by block ``c`` (the first column where
    they disagree); each sub-set of two or more is refined the same way, and the requests left at
    depth ``c`` (no partner deeper) form one group sharing ``c`` blocks if there are two of them or
    more. So every request lands in the deepest group it has a partner in (one level: a request that
    shares only a system prompt with other groups is not merged into them). Groups are ordered by
    their first request, members ascending.

    The requests that share their first block form a class; a flat class (all its members share the
    same leading blocks and no two share more) is one group, found for all classes at once by one
    vectorised compare (:func:`_flat_classes`); only nested classes go through the recursive split
    (:func:`_refine`), with the same result as splitting everything (~3.6 -> ~2 ms of CPU at 2,048
    requests in 128 groups).
    """
    usable = np.maximum((np.asarray(seq_lens, dtype=np.int64) - 1) // block_size, 0)
    usable = np.minimum(usable, block_table.shape[1])
    rows, label, depth, nested = _flat_classes(block_table, usable)
    if len(nested):
        more_rows, more_label = _refine(block_table, usable, nested, depth)
        rows = np.concatenate([rows, more_rows])
        label = np.concatenate([label, more_label + (int(label.max()) + 1 if len(label) else 0)])
    return _assemble(rows, label, depth, block_size)


def _flat_classes(block_table: np.ndarray, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The groups of the flat first-block classes and the rows of the nested ones.

    Returns ``(rows, label, depth [T], nested)``: the grouped rows of flat classes with their group
    label, every request's shared blocks (set at those rows), and the rows of classes that nest (a
    member sharing fewer blocks with the class's first request than the others do, or two members
    sharing a block past the class's depth), left to :func:`_refine`.
    """
    T = len(usable)
    depth = np.zeros(T, dtype=np.int64)
    empty = np.zeros(0, np.int64)
    rows = np.flatnonzero(usable > 0)
    if len(rows) < 2:
        return empty, empty, depth, empty
    first = block_table[rows, 0]
    by_first = np.lexsort((rows, first))
    rows, first = rows[by_first], first[by_first]
    new_class = np.ones(len(rows), dtype=bool)
    new_class[1:] = first[1:] != first[:-1]
    label = np.cumsum(new_class) - 1
    keep = np.bincount(label)[label] > 1
    rows, label, new_class = rows[keep], label[keep], new_class[keep]
    if len(rows) == 0:
        return empty, empty, depth, empty
    new_class[0] = True
    leader = rows[new_class][np.cumsum(new_class) - 1]  # each class's first (smallest) request
    width = int(usable[rows].max())
    limit = np.minimum(usable[rows], usable[leader])
    table = np.ascontiguousarray(block_table[:, :width])
    same = (table.take(rows, axis=0) == table.take(leader, axis=0)) & (np.arange(width) < limit[:, None])
    lcp = np.where(same.all(axis=1), width, same.argmin(axis=1))
    is_leader = rows == leader
    lcp[is_leader] = -1
    class_depth = np.full(int(label.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(class_depth, label, lcp)  # the members' common depth (equal in a flat class)
    d = class_depth[label]
    bad = np.zeros(len(class_depth), dtype=bool)
    bad[label[~is_leader & (lcp != d)]] = True  # members share different depths with the first request
    longer = usable[rows] > d
    stride = int(block_table.max()) + 1
    keys = np.sort(label[longer] * stride + block_table[rows[longer], d[longer]])
    bad[keys[1:][keys[1:] == keys[:-1]] // stride] = True  # a group nested inside
    flat = ~bad[label]
    depth[rows[flat]] = d[flat]
    return rows[flat], label[flat], depth, rows[~flat]


def _refine(block_table: np.ndarray, usable: np.ndarray, candidates: np.ndarray,
            depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The recursive split of ``candidates`` (whole first-block classes): sets that agree on their
    leading blocks are split by the first column where they disagree (a Python loop over the trie's
    nodes). Returns ``(rows, label)`` of the grouped rows and writes their ``depth``."""
    rows_out: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    stack = _split_by_column(block_table, candidates, 0) if len(candidates) > 1 else []
    while stack:
        rows = stack.pop()
        limit = int(usable[rows].min())
        level = _common_blocks(block_table[rows, :limit]) if limit else 0
        if level == 0:
            continue
        deeper = rows[usable[rows] > level]
        parts = _split_by_column(block_table, deeper, level) if len(deeper) > 1 else []
        in_parts = np.concatenate(parts) if parts else np.empty(0, dtype=rows.dtype)
        stack.extend(parts)
        rest = np.setdiff1d(rows, in_parts, assume_unique=True)
        if len(rest) > 1:
            rows_out.append(rest)
            labels.append(np.full(len(rest), len(labels)))
            depth[rest] = level
    if not rows_out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(rows_out), np.concatenate(labels)


def _assemble(rows: np.ndarray, label: np.ndarray, depth: np.ndarray, block_size: int) -> SharedGroups:
    """:class:`SharedGroups` from the grouped ``rows``, their group ``label`` (any ids) and every request's
    ``depth [T]`` (shared blocks; read at the grouped rows): groups ordered by their first request,
    members ascending, then the requests in no group."""
    T = len(depth)
    rows = rows.astype(np.int64)
    by_label = np.lexsort((rows, label))
    rows, label = rows[by_label], label[by_label]
    new_group = np.ones(len(rows), dtype=bool)
    new_group[1:] = label[1:] != label[:-1]
    firsts = rows[new_group]  # each group's first (smallest) request, groups in label order
    group_of = np.cumsum(new_group) - 1
    rank = np.empty(len(firsts), dtype=np.int64)
    rank[np.argsort(firsts, kind="stable")] = np.arange(len(firsts))
    grouped = rows[np.lexsort((rows, rank[group_of]))]
    single = np.ones(T, dtype=bool)
    single[grouped] = False
    order = np.concatenate([grouped, np.flatnonzero(single)]).astype(np.int32)
    sizes = np.bincount(rank[group_of], minlength=len(firsts))
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    shared_blocks = depth[np.sort(firsts)].astype(np.int32)
    shared_len = np.zeros(T, dtype=np.int32)
    shared_len[grouped] = np.repeat(shared_blocks, sizes) * block_size
    return SharedGroups(order, starts, shared_blocks, shared_len)


def _split_by_column(block_table: np.ndarray, rows: np.ndarray, column: int) -> list[np.ndarray]:
    """The sub-sets of ``rows`` (two or more rows each) that hold the same block in ``column``."""
    keys = block_table[rows, column]
    idx = np.argsort(keys, kind="stable")
    keys, rows = keys[idx], rows[idx]
    cuts = np.flatnonzero(np.diff(keys)) + 1
    return [part for part in np.split(rows, cuts) if len(part) > 1]


@dataclasses.dataclass(frozen=True)
class PagedDecodePlan:
    """The work list of one decode step (all int32 numpy; the launcher copies them to the GPU).

    items: ``[n_items, 8]`` prefix items, columns :data:`ITEM_FIELDS`, ordered (group, split, m tile)
        so that the tiles reading one prefix chunk run side by side.
    order: ``[T]`` request indices, group members contiguous (:attr:`SharedGroups.order`).
    shared_len: ``[T]`` shared prefix tokens per request (its suffix starts there).
    row_splits: ``[T]`` prefix chunks of each request's group (0 outside groups): the prefix
        partial slots of its rows that the step writes.
    shape: the step's fixed sizes (:func:`step_shape`); ``n_items <= shape.items``.
    saved_fraction: share of the step's KV reads (per layer and head) the grouping saves.
    """

    items: np.ndarray
    order: np.ndarray
    shared_len: np.ndarray
    row_splits: np.ndarray
    shape: "StepShape"
    saved_fraction: float
    groups: SharedGroups

    @property
    def n_items(self) -> int:
        return len(self.items)


@dataclasses.dataclass(frozen=True)
class StepShape:
    """The sizes of a decode step over ``rows`` requests that depend on nothing but ``rows`` (and the
    model), so that one CUDA graph captured for a batch size serves every plan of that size.

    rows: requests ``T`` (padded rows included).
    items: prefix item slots; a plan fills the first ``n_items`` and the kernel skips the rest.
    prefix_splits: prefix partial slots per row (``NSP`` = :data:`MAX_PREFIX_SPLITS`).
    suffix_splits: chunks each request's own keys are cut into (``NSS``).
    """

    rows: int
    items: int
    prefix_splits: int
    suffix_splits: int


def step_shape(rows: int, group_size: int, num_kv_heads: int, *, block_m: int = 128, num_sms: int = 132,
               prefix_waves: int = 1) -> StepShape:
    """The fixed sizes of a ``rows``-request step (see :func:`plan_paged_decode` for the split rules).

    Prefix items of any grouping fit in ``ceil(rows*G / block_m) + rows // 2 + ceil(waves*num_sms / Hkv)``:
    a group of ``s`` members has ``ceil(s*G / block_m) <= s*G/block_m + 1`` m tiles, there are at most
    ``rows // 2`` groups, and splits stop once the items about fill the machine ``waves`` times. Suffix splits: the
    largest power of two (at most 16) for which ``rows x Hkv x NSS`` programs still fit the SMs once.
    """
    items = -(-rows * group_size // block_m) + rows // 2 + -(-prefix_waves * num_sms // num_kv_heads)
    nss = 1
    while nss < 16 and rows * num_kv_heads * nss * 2 <= num_sms:
        nss *= 2
    return StepShape(rows, items, MAX_PREFIX_SPLITS, nss)


def plan_paged_decode(block_table: np.ndarray, seq_lens: np.ndarray, block_size: int, group_size: int,
                      num_kv_heads: int, *, block_m: int = 128, min_chunk: int = 512, num_sms: int = 132,
                      prefix_waves: int = 1) -> PagedDecodePlan:
    """Group the requests and cut the work into prefix items (suffix splits come from :func:`step_shape`).

    Args:
        block_table, seq_lens, block_size: as :func:`find_shared_groups`.
        group_size: ``G = Hq / Hkv`` query heads per KV head.
        num_kv_heads: ``Hkv`` (every item runs once per KV head).
        block_m: query rows ``(member, head in group)`` per prefix tile.
        min_chunk: fewest keys per prefix split.
        num_sms: streaming multiprocessors to fill.
        prefix_waves: how many times the prefix programs should fill the SMs (more, smaller programs
            balance better; each split adds a partial to merge).

    Prefix splits: until the prefix programs (items x Hkv) about fill the machine ``prefix_waves`` times, each group's
    shared keys are cut into equal chunks of at least ``min_chunk`` keys (at most
    :data:`MAX_PREFIX_SPLITS`).
    """
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    G = int(group_size)
    shape = step_shape(len(seq_lens), G, num_kv_heads, block_m=block_m, num_sms=num_sms, prefix_waves=prefix_waves)
    groups = find_shared_groups(block_table, seq_lens, block_size)
    sizes = np.diff(groups.starts).astype(np.int64)
    shared = groups.shared_blocks.astype(np.int64) * block_size
    m_tiles = -(-sizes * G // block_m)
    base = int(m_tiles.sum()) * num_kv_heads
    want = min(max(1, -(-prefix_waves * num_sms // max(base, 1))), MAX_PREFIX_SPLITS)
    splits = np.minimum(want, np.maximum(shared // min_chunk, 1)) if len(shared) else np.zeros(0, np.int64)
    chunk = -(-shared // np.maximum(splits, 1))
    per_group = m_tiles * splits
    n_items = int(per_group.sum())
    if n_items > shape.items:  # cannot happen (see step_shape); a planner bug must not write past the buffers
        raise AssertionError(f"{n_items} prefix items exceed the step's {shape.items} slots")
    items = np.zeros((n_items, len(ITEM_FIELDS)), dtype=np.int32)
    if n_items:
        grp = np.repeat(np.arange(len(sizes)), per_group)
        local = np.arange(n_items) - np.repeat(np.cumsum(per_group) - per_group, per_group)
        split, tile = local // m_tiles[grp], local % m_tiles[grp]
        lo = split * chunk[grp]
        items[:, 0] = groups.starts[:-1][grp]
        items[:, 1] = tile * block_m
        items[:, 2] = sizes[grp] * G
        items[:, 3] = lo
        items[:, 4] = np.minimum(lo + chunk[grp], shared[grp])
        items[:, 5] = groups.order[groups.starts[:-1][grp]]
        items[:, 6] = split
    row_splits = np.zeros(len(seq_lens), dtype=np.int32)
    if len(sizes):
        row_splits[groups.order[:groups.starts[-1]]] = np.repeat(splits, sizes)
    total = int(seq_lens.sum())
    return PagedDecodePlan(items=items, order=groups.order, shared_len=groups.shared_len, row_splits=row_splits,
                           shape=shape, saved_fraction=groups.saved_tokens(block_size) / total if total else 0.0,
                           groups=groups)


class PlanCache:
    """Plans the decode steps of one engine, reusing the last plan while it still holds.

    The grouping of a batch changes only when requests join, leave or move rows: a step with the same
    number of requests whose first ``max(shared blocks, 1)`` block-table columns equal the last
    plan's gets the last plan back, so a steady decode costs one array compare instead of a grouping.

    Args:
        planner: ``(block_table, seq_lens) -> PagedDecodePlan``: :func:`plan_paged_decode` with the
            engine's sizes bound (e.g. ``PagedWorkspace.plan``, so plans fit the workspace's steps).
        min_saved: smallest :attr:`PagedDecodePlan.saved_fraction` worth the shared-prefix kernel;
            below it :meth:`plan` returns None (leave the step to the engine's own attention).
    """

    def __init__(self, planner: Callable[[np.ndarray, np.ndarray], PagedDecodePlan], *,
                 min_saved: float = 0.2) -> None:
        self.planner, self.min_saved = planner, min_saved
        self._last: tuple[PagedDecodePlan, bool, np.ndarray] | None = None

    def plan(self, block_table: np.ndarray, seq_lens: np.ndarray, *, always: bool = False,
             ) -> tuple[PagedDecodePlan | None, bool]:
        """``(plan or None, reused)`` for a step's ``block_table [T, W]`` and ``seq_lens [T]``; with
        ``always`` the plan even when it saves less than ``min_saved`` (a captured CUDA graph runs
        the kernel whatever the plan)."""
        if self._reusable(block_table, seq_lens):
            plan, use, _ = self._last
            return (plan if use or always else None), True
        plan = self.planner(block_table, seq_lens)
        use = plan.saved_fraction >= self.min_saved
        depth = max(int(plan.groups.shared_blocks.max()) if plan.groups.n_groups else 0, 1)
        self._last = (plan, use, block_table[:, :depth].copy())
        return (plan if use or always else None), False

    def _reusable(self, block_table: np.ndarray, seq_lens: np.ndarray) -> bool:
        if self._last is None:
            return False
        plan, _, columns = self._last
        return len(plan.order) == len(seq_lens) and np.array_equal(block_table[:, :columns.shape[1]], columns)

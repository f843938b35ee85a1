"""Triton kernels for shared-prefix ("Hydragen") decode attention.

This module imports triton at the top; import it lazily (``monkeybarrel.kernels.attention`` does).
Shapes follow :mod:`monkeybarrel.kernels.reference`: ``q [B, Hq, D]``, ``k/v_prefix [Hkv, P, D]``,
``k/v_suffix [B, Hkv, S, D]``, ``suffix_lens [B]`` int32, ``G = Hq // Hkv``.

Two launches per decode step:

1. ``_hydragen_kernel`` -- one grid that holds two kinds of programs:

   - *prefix tiles* ``(hkv, prefix split, m tile)``: ``BLOCK_M`` query rows, where a row is one
     ``(sequence, q head of the group)`` pair, so ``B*G`` rows per KV head share one pass over the
     prefix. ``q @ K^T`` and ``P @ V`` are ``[BLOCK_M, D] x [D, BLOCK_N]`` tensor-core products (wgmma
     on Hopper); the prefix KV chunk is read by ``ceil(B*G / BLOCK_M)`` programs that run side by side,
     so it comes from HBM about once and from L2 after.
   - *suffix tiles* ``(b, hkv, suffix split)``: the ``G`` query heads of one sequence against a chunk of
     its own suffix (ragged: rows ``>= suffix_lens[b]`` are skipped), memory-bound.

   Prefix tiles get the low program ids, so the compute-bound prefix work starts first and the
   memory-bound suffix work fills the rest of the machine alongside it (one launch, overlapped).
   Every tile writes a float32 partial output normalised over its keys and its log2-sum-exp.

2. The exact log-sum-exp merge of all partials of a row, written in the output dtype (optionally
   with the natural-log LSE). Either a second launch, ``_merge_kernel`` (BLOCK_R output rows per
   program), or inline (``INLINE_MERGE``): every tile counts its arrival on a per-row counter
   (atomic, acquire-release) after writing its partials, and the tile that arrives last for a row
   merges that row. No tile ever waits for another, so the grid order cannot deadlock; the last
   arriver resets the counter to zero for the next launch.

Softmax runs in base 2 (``exp2``) with ``qk_scale = scale * log2(e)``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _softmax_step(acc, l_i, m_i, s, v):
    """One online-softmax step. s: [M, N] fp32 log2-domain scores; v: [N, D]; acc: [M, D] fp32."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _row_offsets(rows, ok, page_row, stride_n, stride_page, BS: tl.constexpr, PAGED: tl.constexpr):
    """Element offsets of key rows ``rows`` of one head: ``rows * stride_n`` for a contiguous head, or
    through the block table row ``page_row`` (``BS`` tokens a page, pages ``stride_page`` apart) for a
    paged KV cache. Rows where ``ok`` is False look up page 0 (their loads are masked)."""
    if PAGED:
        page = tl.load(page_row + rows // BS, mask=ok, other=0).to(tl.int64)
        return page * stride_page + (rows % BS) * stride_n
    else:
        return rows * stride_n


@triton.jit
def _attend_range(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, lo, hi, qk_scale,
                  D: tl.constexpr, BLOCK_N: tl.constexpr,
                  page_row, stride_kpage, stride_vpage, BS: tl.constexpr, PAGED: tl.constexpr):
    """Attend the query block ``q [M, D]`` to key rows ``[lo, hi)`` of one head (no-op if hi <= lo).

    ``k_base``/``v_base`` point at row 0, column 0 of that head; rows are ``stride_kn`` apart and
    columns contiguous. With ``PAGED``, row ``r`` lives in page ``page_row[r // BS]`` (a block-table
    row), at ``page * stride_kpage + (r % BS) * stride_kn``. Full blocks run unmasked; one masked block
    handles the tail. Keys and values are widened to the query's dtype as they are loaded, so an FP8
    (e4m3) cache is read at one byte an element and multiplied in bf16/fp16 (its scales are applied by
    the caller: ``qk_scale`` for keys, the merge's ``out_scale`` for values).
    """
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    n_full = lo + (tl.maximum(hi - lo, 0) // BLOCK_N) * BLOCK_N
    for start in range(lo, n_full, BLOCK_N):
        rows = start + offs_n
        k_off = _row_offsets(rows, rows < hi, page_row, stride_kn, stride_kpage, BS, PAGED)
        v_off = _row_offsets(rows, rows < hi, page_row, stride_vn, stride_vpage, BS, PAGED)
        k = tl.load(k_base + k_off[None, :] + offs_d[:, None]).to(q.dtype)  # [D, BLOCK_N]
        s = tl.dot(q, k) * qk_scale
        v = tl.load(v_base + v_off[:, None] + offs_d[None, :]).to(q.dtype)  # [BLOCK_N, D]
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, s, v)
    if n_full < hi:
        rows = n_full + offs_n
        ok = rows < hi
        k_off = _row_offsets(rows, ok, page_row, stride_kn, stride_kpage, BS, PAGED)
        v_off = _row_offsets(rows, ok, page_row, stride_vn, stride_vpage, BS, PAGED)
        k = tl.load(k_base + k_off[None, :] + offs_d[:, None], mask=ok[None, :], other=0.0).to(q.dtype)
        s = tl.dot(q, k) * qk_scale
        s = tl.where(ok[None, :], s, float("-inf"))
        v = tl.load(v_base + v_off[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0).to(q.dtype)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, s, v)
    return acc, l_i, m_i


@triton.jit
def _finish(acc, l_i, m_i):
    """Normalised partial output and its log2-sum-exp (``-inf`` and zeros for an empty range)."""
    nonempty = l_i > 0.0
    l_safe = tl.where(nonempty, l_i, 1.0)
    o = acc / l_safe[:, None]
    lse2 = tl.where(nonempty, m_i + tl.math.log2(l_safe), float("-inf"))
    return o, lse2


@triton.jit
def _merge_rows(b, g, hkv, ok, OP, LP, OS, LS, OUT, LSE_OUT, n_rows, stride_ob, stride_oh,
                HKV, N_PSPLITS, N_SSPLITS,
                row_psplits, out_scale, G: tl.constexpr, D: tl.constexpr, WRITE_LSE: tl.constexpr):
    """Merge every partial of rows ``(b, g)`` of KV head hkv where ``ok`` (vectors ``[R]``, int64 b;
    hkv a scalar or a vector).

    Prefix partials ``OP/LP[hkv, sp, b*G+g]`` for ``sp < row_psplits`` (a vector ``[R]``, or
    ``N_PSPLITS`` for all slots), suffix partials ``OS/LS[b, hkv, ss, g]`` (log2 LSE);
    writes ``OUT[b, hkv*G+g, :]`` times ``out_scale`` (an FP8 cache's value scale; 1.0 otherwise) and, if
    WRITE_LSE, ``LSE_OUT[b, hkv*G+g]`` (natural log).
    Partials are loaded with ``.cg`` (L2, not L1): other SMs wrote them during this launch.
    """
    offs_d = tl.arange(0, D)
    rows = b * G + g
    m = tl.full(g.shape, float("-inf"), dtype=tl.float32)
    for sp in range(N_PSPLITS):
        part = (hkv * N_PSPLITS + sp) * n_rows + rows
        m = tl.maximum(m, tl.load(LP + part, mask=ok & (sp < row_psplits), other=float("-inf"), cache_modifier=".cg"))
    for ss in range(N_SSPLITS):
        part = ((b * HKV + hkv) * N_SSPLITS + ss) * G + g
        m = tl.maximum(m, tl.load(LS + part, mask=ok, other=float("-inf"), cache_modifier=".cg"))
    m = tl.where(m == float("-inf"), 0.0, m)
    acc = tl.zeros([g.shape[0], D], dtype=tl.float32)
    den = tl.zeros(g.shape, dtype=tl.float32)
    for sp in range(N_PSPLITS):
        part = (hkv * N_PSPLITS + sp) * n_rows + rows
        lp = tl.load(LP + part, mask=ok & (sp < row_psplits), other=float("-inf"), cache_modifier=".cg")
        w = tl.math.exp2(lp - m)
        o = tl.load(OP + part[:, None] * D + offs_d[None, :], mask=(ok & (lp > float("-inf")))[:, None], other=0.0,
                    cache_modifier=".cg")
        acc += w[:, None] * o
        den += w
    for ss in range(N_SSPLITS):
        part = ((b * HKV + hkv) * N_SSPLITS + ss) * G + g
        w = tl.math.exp2(tl.load(LS + part, mask=ok, other=float("-inf"), cache_modifier=".cg") - m)
        o = tl.load(OS + part[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0, cache_modifier=".cg")
        acc += w[:, None] * o
        den += w
    den_safe = tl.where(den > 0.0, den, 1.0)
    head = hkv * G + g
    tl.store(OUT + b[:, None] * stride_ob + head[:, None] * stride_oh + offs_d[None, :],
             (acc * (out_scale / den_safe)[:, None]).to(OUT.dtype.element_ty), mask=ok[:, None])
    if WRITE_LSE:
        lse = tl.where(den > 0.0, (m + tl.math.log2(den_safe)) * 0.6931471805599453, float("-inf"))
        tl.store(LSE_OUT + b * (HKV * G) + head, lse, mask=ok)


@triton.jit
def _arrive_and_merge(b, g, hkv, ok, CNT, OP, LP, OS, LS, OUT, LSE_OUT, n_rows, stride_ob, stride_oh,
                      HKV, N_PSPLITS, N_SSPLITS,
                      G: tl.constexpr, D: tl.constexpr, WRITE_LSE: tl.constexpr):
    """After this tile stored its partials of rows (b, g): count the arrival; merge the rows it completed.

    ``CNT[hkv, b*G+g]`` int32 counts arrivals; a row is complete after ``N_PSPLITS + N_SSPLITS``.
    The barrier before the atomic orders all threads' partial stores before the release; the one
    after orders the acquire before other threads' loads.
    """
    cidx = hkv * n_rows + b * G + g
    tl.debug_barrier()
    old = tl.atomic_add(CNT + cidx, 1, mask=ok, sem="acq_rel", scope="gpu")
    last = ok & (old == N_PSPLITS + N_SSPLITS - 1)
    tl.debug_barrier()
    if tl.sum(last.to(tl.int32), axis=0) > 0:
        _merge_rows(b, g, hkv, last, OP, LP, OS, LS, OUT, LSE_OUT, n_rows, stride_ob, stride_oh,
                    HKV, N_PSPLITS, N_SSPLITS, N_PSPLITS, 1.0, G, D, WRITE_LSE)
        tl.store(CNT + cidx, 0, mask=last)


@triton.jit
def _prefix_tile(tile, Q, KP, VP, OP, LP, n_rows, P, prefix_chunk, qk_scale,
                 stride_qb, stride_qh, stride_kph, stride_kpn, stride_vph, stride_vpn,
                 N_M_TILES, N_PSPLITS,
                 G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Prefix tile ``(hkv, split, m)``: rows ``r = b*G + g`` of KV head ``hkv`` vs prefix chunk ``split``.

    Writes ``OP[hkv, split, r, :]`` (fp32, ``[Hkv, NSP, B*G, D]``) and ``LP[hkv, split, r]``.
    Returns ``(m_tile, hkv)`` for the merge.
    """
    m_tile = tile % N_M_TILES
    rest = tile // N_M_TILES
    split = rest % N_PSPLITS
    hkv = rest // N_PSPLITS
    rows = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    b = (rows // G).to(tl.int64)
    g = rows % G
    head = hkv * G + g
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b[:, None] * stride_qb + head[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    lo = split * prefix_chunk
    hi = tl.minimum(lo + prefix_chunk, P)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    acc, l_i, m_i = _attend_range(acc, l_i, m_i, q, KP + hkv * stride_kph, VP + hkv * stride_vph,
                                  stride_kpn, stride_vpn, lo, hi, qk_scale, D, BLOCK_N, KP, 0, 0, 1, False)
    o, lse2 = _finish(acc, l_i, m_i)
    part = (hkv * N_PSPLITS + split).to(tl.int64) * n_rows + rows
    tl.store(OP + part[:, None] * D + offs_d[None, :], o, mask=row_ok[:, None])
    tl.store(LP + part, lse2, mask=row_ok)
    return m_tile, hkv


@triton.jit
def _suffix_tile(tile, Q, KS, VS, LENS, OS, LS, suffix_chunk, qk_scale,
                 stride_qb, stride_qh, stride_ksb, stride_ksh, stride_ksn, stride_vsb, stride_vsh, stride_vsn,
                 HKV, N_SSPLITS,
                 G: tl.constexpr, D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    """Suffix tile ``(b, hkv, split)``: the G heads of sequence b vs rows of its suffix chunk ``split``.

    Only rows ``< suffix_lens[b]`` count. Writes ``OS[b, hkv, split, g, :]`` (fp32,
    ``[B, Hkv, NSS, G, D]``) and ``LS[b, hkv, split, g]``. Returns ``(b, g, hkv, g_ok)``.
    """
    split = tile % N_SSPLITS
    bh = tile // N_SSPLITS
    hkv = bh % HKV
    b1 = (bh // HKV).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    g_ok = g < G
    offs_d = tl.arange(0, D)
    q = tl.load(Q + b1 * stride_qb + (hkv * G + g)[:, None] * stride_qh + offs_d[None, :],
                mask=g_ok[:, None], other=0.0)
    length = tl.load(LENS + b1)
    lo = split * suffix_chunk
    hi = tl.minimum(lo + suffix_chunk, length)
    acc = tl.zeros([BLOCK_G, D], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    acc, l_i, m_i = _attend_range(acc, l_i, m_i, q,
                                  KS + b1 * stride_ksb + hkv * stride_ksh, VS + b1 * stride_vsb + hkv * stride_vsh,
                                  stride_ksn, stride_vsn, lo, hi, qk_scale, D, BLOCK_N, KS, 0, 0, 1, False)
    o, lse2 = _finish(acc, l_i, m_i)
    part = tile.to(tl.int64) * G + g
    tl.store(OS + part[:, None] * D + offs_d[None, :], o, mask=g_ok[:, None])
    tl.store(LS + part, lse2, mask=g_ok)
    b = tl.zeros([BLOCK_G], dtype=tl.int64) + b1
    return b, g, hkv, g_ok


@triton.jit
def _hydragen_kernel(
    Q, KP, VP, KS, VS, LENS, OP, LP, OS, LS, CNT, OUT, LSE_OUT,
    n_rows, P, prefix_chunk, suffix_chunk, qk_scale, n_prefix_tiles, n_suffix_tiles,
    stride_qb, stride_qh,
    stride_kph, stride_kpn, stride_vph, stride_vpn,
    stride_ksb, stride_ksh, stride_ksn, stride_vsb, stride_vsh, stride_vsn,
    stride_ob, stride_oh,
    HKV, N_M_TILES, N_PSPLITS, N_SSPLITS,
    G: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_NS: tl.constexpr, PHASE: tl.constexpr, SUFFIX_FIRST: tl.constexpr,
    INLINE_MERGE: tl.constexpr, WRITE_LSE: tl.constexpr, MERGE_ROWS: tl.constexpr,
):
    """PHASE 0: prefix and suffix tiles in one grid (prefix tiles first unless SUFFIX_FIRST);
    PHASE 1: prefix tiles only; PHASE 2: suffix tiles only. INLINE_MERGE: see the module docstring."""
    pid = tl.program_id(0)
    if PHASE == 0:
        if SUFFIX_FIRST:
            is_prefix = pid >= n_suffix_tiles
            tile = tl.where(is_prefix, pid - n_suffix_tiles, pid)
        else:
            is_prefix = pid < n_prefix_tiles
            tile = tl.where(is_prefix, pid, pid - n_prefix_tiles)
    else:
        is_prefix = PHASE == 1
        tile = pid
    if is_prefix:
        m_tile, phkv = _prefix_tile(tile, Q, KP, VP, OP, LP, n_rows, P, prefix_chunk, qk_scale,
                                    stride_qb, stride_qh, stride_kph, stride_kpn, stride_vph, stride_vpn,
                                    N_M_TILES, N_PSPLITS, G, D, BLOCK_M, BLOCK_N)
        if INLINE_MERGE:  # in chunks of MERGE_ROWS rows, to bound registers
            for c in tl.static_range(BLOCK_M // MERGE_ROWS):
                rows = m_tile * BLOCK_M + c * MERGE_ROWS + tl.arange(0, MERGE_ROWS)
                _arrive_and_merge((rows // G).to(tl.int64), rows % G, phkv, rows < n_rows, CNT, OP, LP, OS, LS,
                                  OUT, LSE_OUT, n_rows, stride_ob, stride_oh, HKV, N_PSPLITS, N_SSPLITS,
                                  G, D, WRITE_LSE)
    else:
        sb, sg, shkv, sok = _suffix_tile(tile, Q, KS, VS, LENS, OS, LS, suffix_chunk, qk_scale,
                                     stride_qb, stride_qh, stride_ksb, stride_ksh, stride_ksn,
                                     stride_vsb, stride_vsh, stride_vsn,
                                     HKV, N_SSPLITS, G, D, BLOCK_G, BLOCK_NS)
        if INLINE_MERGE:
            _arrive_and_merge(sb, sg, shkv, sok, CNT, OP, LP, OS, LS, OUT, LSE_OUT, n_rows, stride_ob, stride_oh,
                              HKV, N_PSPLITS, N_SSPLITS, G, D, WRITE_LSE)


@triton.jit(do_not_specialize=["n_rows", "n_out_rows", "N_PSPLITS", "N_SSPLITS"])
def _merge_kernel(OP, LP, OS, LS, OUT, LSE_OUT, n_rows, n_out_rows, stride_ob, stride_oh,
                  HKV, N_PSPLITS, N_SSPLITS,
                  G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, WRITE_LSE: tl.constexpr):
    """Merge the NSP prefix and NSS suffix partials of BLOCK_R output rows ``r = b*Hq + h``."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    hq = HKV * G
    b = (r // hq).to(tl.int64)
    h = r % hq
    _merge_rows(b, h % G, h // G, r < n_out_rows, OP, LP, OS, LS, OUT, LSE_OUT, n_rows, stride_ob, stride_oh,
                HKV, N_PSPLITS, N_SSPLITS, N_PSPLITS, 1.0, G, D, WRITE_LSE)


@triton.jit
def _attend_pages(q, k_head, v_head, page_row, lo, hi, qk_scale, stride_kpage, stride_kn, stride_vpage, stride_vn,
                  M: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows ``q [M, D]`` against key rows ``[lo, hi)`` of one head of a paged cache (pages from the
    block-table row ``page_row``): the normalised partial output ``[M, D]`` and its log2-sum-exp."""
    acc = tl.zeros([M, D], dtype=tl.float32)
    l_i = tl.zeros([M], dtype=tl.float32)
    m_i = tl.full([M], float("-inf"), dtype=tl.float32)
    acc, l_i, m_i = _attend_range(acc, l_i, m_i, q, k_head, v_head, stride_kn, stride_vn, lo, hi, qk_scale, D,
                                  BLOCK_N, page_row, stride_kpage, stride_vpage, BS, True)
    return _finish(acc, l_i, m_i)


@triton.jit
def _paged_prefix_item(item, hkv, Q, KC, VC, BT, ITEMS, ORDER, OP, LP, n_rows, qk_scale,
                       stride_qt, stride_qh, stride_kpage, stride_kn, stride_kh, stride_vpage, stride_vn, stride_vh,
                       stride_bt, NSP,
                       G: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """Prefix item ``(item, hkv)``: the item's rows ``(member, g)`` of one group against the group's
    shared keys ``[key_lo, key_hi)`` read through the leader's block-table row; writes
    ``OP/LP[hkv, split, t*G + g]``."""
    base = ITEMS + item * 8
    order_start = tl.load(base)
    flat_start = tl.load(base + 1)
    flat_rows = tl.load(base + 2)
    lo = tl.load(base + 3)
    hi = tl.load(base + 4)
    leader = tl.load(base + 5).to(tl.int64)
    split = tl.load(base + 6)
    offs_d = tl.arange(0, D)
    r = flat_start + tl.arange(0, BLOCK_M)
    ok = r < flat_rows
    g = r % G
    t = tl.load(ORDER + order_start + r // G, mask=ok, other=0).to(tl.int64)
    q = tl.load(Q + t[:, None] * stride_qt + (hkv * G + g)[:, None] * stride_qh + offs_d[None, :],
                mask=ok[:, None], other=0.0)
    o, lse2 = _attend_pages(q, KC + hkv * stride_kh, VC + hkv * stride_vh, BT + leader * stride_bt, lo, hi,
                            qk_scale, stride_kpage, stride_kn, stride_vpage, stride_vn, BLOCK_M, D, BS, BLOCK_N)
    part = (hkv * NSP + split).to(tl.int64) * n_rows + t * G + g
    tl.store(OP + part[:, None] * D + offs_d[None, :], o, mask=ok[:, None])
    tl.store(LP + part, lse2, mask=ok)


@triton.jit
def _paged_suffix_tile(tile, Q, KC, VC, BT, SEQ_LENS, SHARED_LEN, OS, LS, qk_scale,
                       stride_qt, stride_qh, stride_kpage, stride_kn, stride_kh, stride_vpage, stride_vn, stride_vh,
                       stride_bt, HKV, NSS,
                       G: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, BLOCK_G: tl.constexpr,
                       BLOCK_NS: tl.constexpr):
    """Suffix tile ``(t, hkv, split)``: request t's G heads against its own keys
    ``[SHARED_LEN[t], SEQ_LENS[t])`` (chunk ``split`` of NSS) through its block-table row; writes
    ``OS/LS[t, hkv, split, g]``."""
    split = tile % NSS
    th = tile // NSS
    hkv = th % HKV
    t = (th // HKV).to(tl.int64)
    offs_d = tl.arange(0, D)
    g = tl.arange(0, BLOCK_G)
    g_ok = g < G
    q = tl.load(Q + t * stride_qt + (hkv * G + g)[:, None] * stride_qh + offs_d[None, :],
                mask=g_ok[:, None], other=0.0)
    start = tl.load(SHARED_LEN + t)
    end = tl.load(SEQ_LENS + t)
    chunk = tl.cdiv(tl.cdiv(tl.maximum(end - start, 0), NSS), BLOCK_NS) * BLOCK_NS
    lo = start + split * chunk
    hi = tl.minimum(lo + chunk, end)
    o, lse2 = _attend_pages(q, KC + hkv * stride_kh, VC + hkv * stride_vh, BT + t * stride_bt, lo, hi,
                            qk_scale, stride_kpage, stride_kn, stride_vpage, stride_vn, BLOCK_G, D, BS, BLOCK_NS)
    part = tile.to(tl.int64) * G + g
    tl.store(OS + part[:, None] * D + offs_d[None, :], o, mask=g_ok[:, None])
    tl.store(LS + part, lse2, mask=g_ok)


@triton.jit(do_not_specialize=["n_rows", "item_slots", "NSP", "NSS"])
def _paged_decode_kernel(
    Q, KC, VC, BT, SEQ_LENS, N_LIVE, ITEMS, ORDER, SHARED_LEN, OP, LP, OS, LS,
    n_rows, item_slots, qk_scale,
    stride_qt, stride_qh,
    stride_kpage, stride_kn, stride_kh, stride_vpage, stride_vn, stride_vh, stride_bt,
    HKV, NSP, NSS,
    G: tl.constexpr, D: tl.constexpr, BS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_NS: tl.constexpr,
):
    """Shared-prefix decode over a paged KV cache (vLLM's layout), many groups in one grid.

    The grid depends only on the batch size (``prefix_groups.step_shape``), so a CUDA graph captured
    for a batch size replays any plan: programs ``[0, item_slots * HKV)`` are prefix item slots
    ``(item, hkv)`` (item-major), of which the first ``N_LIVE[0]`` items hold work
    (``_paged_prefix_item``; ``ITEMS`` rows are ``prefix_groups.ITEM_FIELDS``) and the rest return at
    once; the rest are suffix tiles (``_paged_suffix_tile``). Nothing is specialised on the sizes (one
    compiled kernel serves every batch size). ``_paged_merge_kernel`` then merges the partials of each row.
    """
    pid = tl.program_id(0)
    n_prefix_programs = item_slots * HKV
    if pid < n_prefix_programs:
        item = pid // HKV
        if item < tl.load(N_LIVE):
            _paged_prefix_item(item, pid % HKV, Q, KC, VC, BT, ITEMS, ORDER, OP, LP, n_rows, qk_scale,
                               stride_qt, stride_qh, stride_kpage, stride_kn, stride_kh, stride_vpage, stride_vn,
                               stride_vh, stride_bt, NSP, G, D, BS, BLOCK_M, BLOCK_N)
    else:
        _paged_suffix_tile(pid - n_prefix_programs, Q, KC, VC, BT, SEQ_LENS, SHARED_LEN, OS, LS, qk_scale,
                           stride_qt, stride_qh, stride_kpage, stride_kn, stride_kh, stride_vpage, stride_vn,
                           stride_vh, stride_bt, HKV, NSS, G, D, BS, BLOCK_G, BLOCK_NS)


@triton.jit(do_not_specialize=["n_rows", "n_out_rows", "NSP", "NSS", "out_scale"])
def _paged_merge_kernel(OP, LP, OS, LS, ROW_SPLITS, OUT, n_rows, n_out_rows, stride_ob, stride_oh, HKV, NSP, NSS,
                        out_scale, G: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr):
    """Merge the partials of BLOCK_R output rows ``r = t*Hq + h``: the prefix slots its group wrote
    (``ROW_SPLITS[t]``) and every suffix slot; the output is scaled by ``out_scale`` (an FP8 cache's value scale)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    hq = HKV * G
    t = (r // hq).to(tl.int64)
    h = r % hq
    ok = r < n_out_rows
    splits = tl.load(ROW_SPLITS + t, mask=ok, other=0)
    _merge_rows(t, h % G, h // G, ok, OP, LP, OS, LS, OUT, OUT, n_rows, stride_ob, stride_oh,
                HKV, NSP, NSS, splits, out_scale, G, D, False)

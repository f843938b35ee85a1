"""Paged, many-group shared-prefix decode: grouping and planning on CPU, the kernel on GPU / Triton's interpreter.

The layouts imitate vLLM with prefix caching: physical blocks drawn at random from a pool; the n
samples of one prompt hold the same blocks for the prompt's full blocks and their own blocks after;
optionally a system prompt's blocks shared by several prompts; padded rows (seq_len 0, block 0).
"""

from __future__ import annotations

import functools
import textwrap

import numpy as np
import pytest
import torch

from monkeybarrel.kernels.prefix_groups import find_shared_groups, plan_paged_decode
from monkeybarrel.kernels.reference import paged_attention_reference, paged_plan_reference
from triton_interpreter import run_in_interpreter


def paged_layout(prompts, block_size=16, system_blocks=0, padded=0, seed=0, width=None):
    """Block table and seq_lens of a decode batch.

    prompts: list of (prompt_len, [suffix lengths of its samples]); samples of a prompt share its full
    blocks, the first ``system_blocks`` blocks are shared by every prompt. Returns
    ``(block_table [T, W] int32, seq_lens [T] int32, num_blocks)``; block 0 is the null block.
    """
    rng = np.random.default_rng(seed)
    rows, lens = [], []
    next_id = iter(rng.permutation(np.arange(1, 100_000)))
    system = [int(next(next_id)) for _ in range(system_blocks)]
    for prompt_len, suffixes in prompts:
        full = prompt_len // block_size
        own_prompt = [int(next(next_id)) for _ in range(full - system_blocks)]
        for s in suffixes:
            total = prompt_len + s
            n_blocks = -(-total // block_size)
            rows.append(system + own_prompt + [int(next(next_id)) for _ in range(n_blocks - full)])
            lens.append(total)
    order = rng.permutation(len(rows))  # vLLM's batch order is not grouped
    rows, lens = [rows[i] for i in order], [lens[i] for i in order]
    rows += [[0]] * padded
    lens += [0] * padded
    W = width or max(len(r) for r in rows)
    table = np.zeros((len(rows), W), dtype=np.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    used = np.unique(table)
    remap = np.zeros(used.max() + 1, dtype=np.int32)
    remap[used] = np.arange(len(used))  # compact ids (keeps 0 -> 0) so the cache stays small
    return remap[table], np.array(lens, dtype=np.int32), len(used)


def test_groups_follow_shared_blocks():
    table, lens, _ = paged_layout([(100, [5, 9, 1]), (64, [3, 3]), (40, [7])], block_size=16, padded=2)
    groups = find_shared_groups(table, lens, 16)
    assert groups.n_groups == 2
    found = sorted((sorted(lens[groups.members(g)].tolist()), int(groups.shared_blocks[g]))
                   for g in range(groups.n_groups))
    # prompt 100: 6 full blocks shared by its 3 samples; prompt 64: 4 full blocks, but a sample at
    # seq_len 67 writes its current token into block 4, so all 4 are shareable
    assert found == [([67, 67], 4), ([101, 105, 109], 6)]
    assert sorted(groups.order.tolist()) == list(range(len(lens)))  # a permutation
    alone = np.setdiff1d(np.arange(len(lens)), np.concatenate([groups.members(g) for g in range(2)]))
    assert (groups.shared_len[alone] == 0).all()  # the single sample and the padded rows


def test_groups_take_the_deepest_level_and_ignore_partial_blocks():
    # two prompts share a 2-block system prompt; each prompt has 3 samples
    table, lens, _ = paged_layout([(80, [4, 4, 4]), (96, [1, 2, 3])], block_size=16, system_blocks=2)
    groups = find_shared_groups(table, lens, 16)
    assert sorted(int(b) for b in groups.shared_blocks) == [5, 6]
    # a prompt whose length is a multiple of the block size: the current token starts a new block
    table, lens, _ = paged_layout([(32, [1, 1])], block_size=16)
    assert find_shared_groups(table, lens, 16).shared_blocks.tolist() == [2]
    # nothing shared: no groups, plan saves nothing
    table, lens, _ = paged_layout([(50, [3]), (70, [2]), (33, [9])])
    plan = plan_paged_decode(table, lens, 16, 4, 8)
    assert plan.groups.n_groups == 0 and plan.n_items == 0 and plan.saved_fraction == 0.0


@pytest.mark.parametrize("family", ["independent prompts", "shared system prompt", "shared first shot", "random tables"])
def test_grouping_equals_the_recursive_split_of_everything(family):
    """Flat first-block classes grouped by one vectorised compare, nested ones by the recursive split:
    the same groups as the recursive split of the whole table, on tables with and without nesting."""
    from monkeybarrel.kernels import prefix_groups as pg
    rng = np.random.default_rng(len(family))
    nested = 0
    for trial in range(120):
        if family == "random tables":  # no prefix-cache structure: blocks repeat anywhere
            T, W = int(rng.integers(2, 14)), int(rng.integers(1, 7))
            table = rng.integers(1, 5, (T, W)).astype(np.int32)
            lens = rng.integers(0, W * 16 + 1, T).astype(np.int32)
        else:
            system = int(family == "shared system prompt") * int(rng.integers(1, 3))
            prompts = [(int(rng.integers(16 * system + 1, 400)), rng.integers(1, 40, int(rng.integers(1, 7))).tolist())
                       for _ in range(int(rng.integers(1, 14)))]
            table, lens, _ = paged_layout(prompts, system_blocks=system, padded=int(rng.integers(0, 3)), seed=trial)
            if family == "shared first shot":  # two prompts drawn the same first worked example
                rows = np.flatnonzero(lens > 48)
                if len(rows) >= 2:
                    donor, taker = table[rows[0]], rows[-1]
                    table[table == table[taker, 0]] = donor[0]
        usable = np.minimum(np.maximum((lens.astype(np.int64) - 1) // 16, 0), table.shape[1])
        depth = np.zeros(len(lens), np.int64)
        rows, label = pg._refine(table, usable, np.flatnonzero(usable > 0), depth)
        want = pg._assemble(rows, label, depth, 16)
        got = find_shared_groups(table, lens, 16)
        for field in ("order", "starts", "shared_blocks", "shared_len"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), (family, trial, field)
        nested += len(pg._flat_classes(table, usable)[3]) > 0
    if family == "independent prompts":
        assert nested == 0  # decode steps of independent prompts (>= 1 generated token) are all flat
    else:
        assert nested > 0


def test_plan_items_cover_each_groups_keys_and_rows_once():
    table, lens, _ = paged_layout([(2048, [30] * 40), (700, [1] * 3), (5000, [100] * 2)], seed=3)
    G, Hkv = 4, 8
    plan = plan_paged_decode(table, lens, 16, G, Hkv, block_m=128, num_sms=132)
    groups = plan.groups
    for g in range(groups.n_groups):
        start = groups.starts[g]
        mine = plan.items[plan.items[:, 0] == start]
        n_rows = len(groups.members(g)) * G
        keys = int(groups.shared_blocks[g]) * 16
        cover = np.zeros((n_rows, keys), dtype=np.int32)
        for order_start, flat, flat_rows, lo, hi, leader, split, _ in mine:
            assert flat_rows == n_rows and leader == groups.order[start] and split < plan.row_splits[leader] <= plan.shape.prefix_splits
            cover[flat:min(flat + 128, n_rows), lo:hi] += 1
        assert (cover == 1).all()
    assert plan.saved_fraction > 0.8  # 40 samples of a 2048-token prompt dominate


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_plan_decomposition_equals_paged_attention(dtype):
    table, lens, n_blocks = paged_layout([(70, [5, 9, 1]), (64, [3, 16]), (40, [7]), (33, [0, 2])],
                                         block_size=16, system_blocks=1, padded=1, seed=1)
    T, Hq, Hkv, D = len(lens), 8, 2, 32
    g = torch.Generator().manual_seed(0)
    q = torch.randn(T, Hq, D, generator=g, dtype=dtype)
    k = torch.randn(n_blocks, 16, Hkv, D, generator=g, dtype=dtype)
    v = torch.randn(n_blocks, 16, Hkv, D, generator=g, dtype=dtype)
    plan = plan_paged_decode(table, lens, 16, Hq // Hkv, Hkv)
    assert plan.groups.n_groups >= 2
    bt, sl = torch.as_tensor(table), torch.as_tensor(lens)
    ref = paged_attention_reference(q, k, v, bt, sl)
    got = paged_plan_reference(q, k, v, bt, sl, plan)
    assert torch.allclose(got, ref, atol=1e-5 if dtype == torch.float32 else 1e-12)
    # the check can fail: a plan that claims blocks the requests do not share gives another answer
    wrong = torch.as_tensor(table).clone()
    leader = plan.groups.members(0)[0]
    wrong[leader, 0] = (wrong[leader, 0] + 1) % n_blocks
    assert not torch.allclose(paged_plan_reference(q, k, v, wrong, sl, plan), ref, atol=1e-3)


_INTERPRETER_SCRIPT = textwrap.dedent("""
    import numpy as np, torch, sys
    sys.path.insert(0, "tests")
    from test_kernels_paged import paged_layout
    from monkeybarrel.kernels.paged_launch import paged_shared_prefix_decode
    from monkeybarrel.kernels.reference import paged_attention_reference
    torch.manual_seed(0)
    for prompts, Hq, Hkv, D, block_m, sysb in [
        ([(70, [5, 9, 1]), (64, [3, 16]), (40, [7])], 8, 2, 64, 16, 0),
        ([(50, [1] * 9), (20, [30])], 4, 4, 128, 32, 0),
        ([(80, [4, 4, 4]), (96, [1, 2, 3])], 28, 4, 64, 16, 2),
    ]:
        table, lens, nb = paged_layout(prompts, block_size=16, system_blocks=sysb, padded=1)
        T = len(lens)
        q = torch.randn(T, Hq, D, dtype=torch.float16)
        kv = torch.randn(nb, 16, Hkv, 2 * D, dtype=torch.float16)  # K and V interleaved, as in vLLM
        k, v = kv[..., :D], kv[..., D:]
        bt, sl = torch.as_tensor(table), torch.as_tensor(lens)
        out = paged_shared_prefix_decode(q, k, v, bt, sl, block_m=block_m)
        err = (out.float() - paged_attention_reference(q, k, v, bt, sl).float()).abs().max().item()
        print(T, Hq, Hkv, D, err)
        assert err < 2e-3, err
    # one workspace, one batch size, plans that change from step to step (as in a replayed CUDA graph):
    # a plan with fewer groups or splits than the last must not merge the last plan's stale partials
    from monkeybarrel.kernels.paged_launch import PagedWorkspace
    ws = PagedWorkspace(12, 8, 2, 64, torch.device("cpu"), block_m=16, num_sms=64)
    for prompts, padded, seed in [([(1100, [3] * 4), (600, [2] * 3)], 5, 1), ([(900, [1] * 2)], 10, 2),
                                  ([(40, [1]), (70, [2])], 10, 3), ([(1300, [4] * 6), (64, [1] * 2)], 4, 4)]:
        table, lens, nb = paged_layout(prompts, block_size=16, padded=padded, seed=seed, width=100)
        q = torch.randn(12, 8, 64, dtype=torch.float16)
        kv = torch.randn(nb, 16, 2, 128, dtype=torch.float16)
        k, v = kv[..., :64], kv[..., 64:]
        bt, sl = torch.as_tensor(table), torch.as_tensor(lens)
        plan = ws.plan(table, lens, 16)
        step = ws.step(12)
        step.load(plan)
        out = step.run(q, k, v, bt, sl, 64 ** -0.5, torch.empty_like(q))
        err = (out.float() - paged_attention_reference(q, k, v, bt, sl).float()).abs().max().item()
        print("workspace", plan.groups.n_groups, int(plan.row_splits.max()), err)
        assert err < 2e-3 and not out.isnan().any(), err
    print("OK")
""")

_FP8_SCRIPT = textwrap.dedent("""
    import torch, sys
    sys.path.insert(0, "tests")
    from test_kernels_paged import paged_layout
    from monkeybarrel.kernels.paged_launch import paged_shared_prefix_decode
    from monkeybarrel.kernels.reference import paged_attention_reference
    torch.manual_seed(0)
    for prompts, Hq, Hkv, D, block_m, k_scale, v_scale in [
        ([(70, [5, 9, 1]), (64, [3, 16]), (40, [7])], 8, 2, 64, 16, 0.05, 0.03),
        ([(50, [1] * 9), (20, [30])], 4, 4, 128, 32, 1.0, 1.0),
    ]:
        table, lens, nb = paged_layout(prompts, block_size=16, padded=1)
        q = torch.randn(len(lens), Hq, D, dtype=torch.float16)
        kv = torch.randn(nb, 16, Hkv, 2 * D)
        kv[..., :D] /= k_scale
        kv[..., D:] /= v_scale
        cache = kv.to(torch.float8_e4m3fn)  # K and V interleaved in one FP8 tensor, as in vLLM
        k8, v8 = cache[..., :D], cache[..., D:]
        bt, sl = torch.as_tensor(table), torch.as_tensor(lens)
        out = paged_shared_prefix_decode(q, k8, v8, bt, sl, block_m=block_m, k_scale=k_scale, v_scale=v_scale)
        k, v = (k8.float() * k_scale).half(), (v8.float() * v_scale).half()  # what the cache holds
        ref = paged_attention_reference(q.float(), k.float(), v.float(), bt, sl)
        err = (out.float() - ref).abs().max().item()
        unscaled = paged_shared_prefix_decode(q, k8, v8, bt, sl, block_m=block_m)
        off = (unscaled.float() - ref).abs().max().item()
        print("fp8", len(lens), Hq, Hkv, D, err, off)
        assert err < 2e-3, err
        assert k_scale == 1.0 or off > 0.1, off  # the scales matter: without them the answer is wrong
    print("OK")
""")


def test_paged_kernel_reads_an_fp8_cache_in_triton_interpreter():
    """An FP8 (e4m3) KV cache with per-tensor scales gives the attention of the values it stores."""
    pytest.importorskip("triton")
    res = run_in_interpreter(_FP8_SCRIPT)
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stdout + res.stderr


def test_paged_kernel_in_triton_interpreter():
    """The paged kernel's indexing (block tables, groups, splits, padded rows) run by Triton's CPU interpreter."""
    pytest.importorskip("triton")
    res = run_in_interpreter(_INTERPRETER_SCRIPT)
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stdout + res.stderr


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# prompts, Hq, Hkv, D, system blocks, padded rows
GPU_LAYOUTS = [
    ([(2048, list(range(1, 257)))], 32, 8, 64, 0, 0),  # 1 x 256
    ([(2048, [64] * 64)] * 4, 32, 8, 128, 0, 0),  # 4 x 64
    ([(2000 + 7 * i, [1 + 13 * j for j in range(16)]) for i in range(16)], 32, 8, 64, 0, 3),  # 16 x 16, ragged
    ([(7900, [200] * 8), (300, [5] * 2)], 28, 4, 128, 0, 0),  # G=7
    ([(1000, [3, 50, 170])] * 3 + [(500, [9])], 16, 2, 64, 8, 1),  # G=8, system prompt
    ([(777, [1])] * 40, 32, 8, 128, 0, 0),  # nothing shared
]


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("layout", range(len(GPU_LAYOUTS)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_paged_kernel_parity_on_gpu(layout, dtype):
    from monkeybarrel.kernels.paged_launch import paged_shared_prefix_decode

    prompts, Hq, Hkv, D, sysb, padded = GPU_LAYOUTS[layout]
    table, lens, nb = paged_layout(prompts, block_size=16, system_blocks=sysb, padded=padded, seed=layout)
    T = len(lens)
    g = torch.Generator(device="cuda").manual_seed(layout)
    q = torch.randn(T, Hq, D, generator=g, device="cuda", dtype=dtype)
    kv = torch.randn(nb, 16, Hkv, 2 * D, generator=g, device="cuda", dtype=dtype)
    k, v = kv[..., :D], kv[..., D:]
    bt, sl = torch.as_tensor(table, device="cuda"), torch.as_tensor(lens, device="cuda")
    out = paged_shared_prefix_decode(q, k, v, bt, sl)
    ref = paged_attention_reference(q.double(), k.double(), v.double(), bt, sl).float()
    err = (out.float() - ref).abs().max().item()
    print(f"paged parity layout={layout} {dtype} T={T} max_abs_err={err:.2e}")
    assert err < (2e-2 if dtype == torch.bfloat16 else 2e-3)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("layout", range(len(GPU_LAYOUTS)))
def test_paged_kernel_fp8_cache_parity_on_gpu(layout):
    """FP8 e4m3 KV (as vLLM stores it with ``kv_cache_dtype: fp8``) against the attention of the stored values."""
    from monkeybarrel.kernels.paged_launch import paged_shared_prefix_decode

    prompts, Hq, Hkv, D, sysb, padded = GPU_LAYOUTS[layout]
    table, lens, nb = paged_layout(prompts, block_size=16, system_blocks=sysb, padded=padded, seed=layout)
    g = torch.Generator(device="cuda").manual_seed(layout)
    q = torch.randn(len(lens), Hq, D, generator=g, device="cuda", dtype=torch.bfloat16)
    k_scale, v_scale = 0.02, 0.05
    kv = torch.randn(nb, 16, Hkv, 2 * D, generator=g, device="cuda")
    kv[..., :D] /= k_scale
    kv[..., D:] /= v_scale
    cache = kv.to(torch.float8_e4m3fn)
    k8, v8 = cache[..., :D], cache[..., D:]
    bt, sl = torch.as_tensor(table, device="cuda"), torch.as_tensor(lens, device="cuda")
    out = paged_shared_prefix_decode(q, k8, v8, bt, sl, k_scale=k_scale, v_scale=v_scale)
    ref = paged_attention_reference(q.double(), k8.double() * k_scale, v8.double() * v_scale, bt, sl).float()
    err = (out.float() - ref).abs().max().item()
    print(f"paged fp8 parity layout={layout} T={len(lens)} max_abs_err={err:.2e}")
    assert err < 2e-2


@pytest.mark.parametrize("seed", range(6))
def test_plans_fit_the_fixed_step_shape(seed):
    """Any grouping of a batch fits the prefix item slots of its batch size (the grid of a captured
    CUDA graph), with per-group splits within the prefix slots."""
    from monkeybarrel.kernels.prefix_groups import step_shape

    rng = np.random.default_rng(seed)
    for _ in range(20):
        n_prompts = int(rng.integers(1, 60))
        prompts = [(int(rng.integers(17, 9000)), [int(x) for x in rng.integers(1, 300, size=rng.integers(1, 9))])
                   for _ in range(n_prompts)]
        table, lens, _ = paged_layout(prompts, padded=int(rng.integers(0, 4)), seed=seed,
                                      system_blocks=int(rng.integers(0, 2)))
        G, Hkv, sms = int(rng.choice([1, 4, 7, 8])), int(rng.choice([1, 2, 8])), int(rng.choice([16, 132]))
        plan = plan_paged_decode(table, lens, 16, G, Hkv, num_sms=sms)
        assert plan.shape == step_shape(len(lens), G, Hkv, num_sms=sms)
        assert plan.n_items <= plan.shape.items
        for start, leader in {(int(i[0]), int(i[5])) for i in plan.items}:
            splits = plan.items[plan.items[:, 0] == start][:, 6]
            members = plan.groups.order[start:plan.groups.starts[list(plan.groups.starts).index(start) + 1]]
            assert (plan.row_splits[members] == splits.max() + 1).all() and splits.max() < plan.shape.prefix_splits
        alone = np.setdiff1d(np.arange(len(lens)), plan.groups.order[:plan.groups.starts[-1]])
        assert (plan.row_splits[alone] == 0).all()


@needs_cuda
@pytest.mark.gpu
def test_paged_step_replayed_from_a_cuda_graph_runs_each_loaded_plan():
    """As in vLLM's full CUDA graphs: capture one step per batch size with an empty plan, then load
    plans of other groupings (and fewer real requests, padded rows) and replay."""
    from monkeybarrel.kernels.paged_launch import PagedWorkspace

    B, Hq, Hkv, D, W, dtype = 64, 32, 8, 64, 600, torch.bfloat16
    ws = PagedWorkspace(B, Hq, Hkv, D, torch.device("cuda"))
    g = torch.Generator(device="cuda").manual_seed(0)
    nb = 16000
    kv = torch.randn(nb, 16, Hkv, 2 * D, generator=g, device="cuda", dtype=dtype)
    k, v = kv[..., :D], kv[..., D:]
    q = torch.zeros(B, Hq, D, device="cuda", dtype=dtype)
    bt = torch.zeros(B, W, device="cuda", dtype=torch.int32)
    sl = torch.zeros(B, device="cuda", dtype=torch.int32)
    out = torch.zeros_like(q)
    step = ws.step(B)
    step.load(ws.plan(np.zeros((B, 1), np.int32), np.zeros(B, np.int32), 16))
    step.run(q, k, v, bt, sl, D ** -0.5, out)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.run(q, k, v, bt, sl, D ** -0.5, out)
    for i, (prompts, padded) in enumerate([([(2048, [64] * 16)] * 4, 0), ([(7900, [9] * 40)], 24),
                                           ([(3000 + 50 * j, [1]) for j in range(50)], 14),
                                           ([(1500, [5] * 30), (4000, [200] * 30)], 4)]):
        table, lens, used = paged_layout(prompts, padded=padded, seed=i, width=W)
        assert used <= nb
        bt.copy_(torch.as_tensor(table))
        sl.copy_(torch.as_tensor(lens))
        q.copy_(torch.randn(B, Hq, D, generator=g, device="cuda", dtype=dtype))
        step.load(ws.plan(table, lens, 16))
        graph.replay()
        ref = paged_attention_reference(q.double(), k.double(), v.double(), bt, sl).float()
        err = (out.float() - ref).abs().max().item()
        print(f"graph replay {i}: groups={ws.loaded.groups.n_groups} max_abs_err={err:.2e}")
        assert err < 2e-2 and not out.isnan().any()


def test_plan_cache_reuses_while_the_shared_columns_hold():
    from monkeybarrel.kernels.prefix_groups import PlanCache

    table, lens, _ = paged_layout([(2048, [10] * 8), (900, [3] * 4)], seed=5, width=200)
    cache = PlanCache(functools.partial(plan_paged_decode, block_size=16, group_size=4, num_kv_heads=8), min_saved=0.2)
    first, reused = cache.plan(table, lens)
    assert first is not None and not reused
    grown = lens + 20  # a steady decode: every request 20 tokens longer, the same blocks
    again, reused = cache.plan(table, grown)
    assert reused and again is first
    swap = [len(lens) - 1, *range(1, len(lens) - 1), 0]  # two requests change rows (vLLM condenses its batch)
    moved, moved_lens = table[swap], grown[swap]
    replanned, reused = cache.plan(moved, moved_lens)
    assert not reused and (replanned.shared_len == first.shared_len[swap]).all()
    fewer, reused = cache.plan(moved[:-1], moved_lens[:-1])  # a request left
    assert not reused and len(fewer.order) == len(lens) - 1


def test_plan_cache_keeps_a_fallback_decision_until_the_batch_changes():
    from monkeybarrel.kernels.prefix_groups import PlanCache

    table, lens, _ = paged_layout([(500, [2]), (700, [5]), (300, [1])], seed=2, width=64)
    cache = PlanCache(functools.partial(plan_paged_decode, block_size=16, group_size=4, num_kv_heads=8))
    assert cache.plan(table, lens) == (None, False)  # nothing shared: the engine's own attention
    assert cache.plan(table, lens + 1) == (None, True)
    src, dst = int(np.argsort(lens)[1]), int(np.argmax(lens))  # the 502- and the 705-token requests
    full = (int(lens[src]) - 1) // 16
    shared = table.copy()
    shared[dst, :full] = shared[src, :full]  # dst replaced by a sample of src's prompt
    plan, reused = cache.plan(shared, lens)
    assert not reused and plan is not None and plan.groups.n_groups == 1

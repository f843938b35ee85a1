"""Benchmark: one decode step of shared-prefix attention on the GPU.

B sequences share a P-token prompt KV; each has its own S-token suffix. bf16, Hq=32, Hkv=8, D=128
(the anchor's setting, /work/shared/reference/kernel_anchor.md). Methods:

  sdpa            torch SDPA over per-sequence KV (prefix replicated B times)        [baseline]
  torch_hydragen  plain-PyTorch decomposition (prefix as one matmul, suffix per sequence, LSE merge)
  flex_packed     FlexAttention (torch.compile) on a packed KV [prefix; suffix_1..B], block mask
  fi_prefix_decode FlashInfer single_prefill (prefix) + batch decode (suffix) + merge_state
  fi_cascade_fa2  FlashInfer MultiLevelCascadeAttentionWrapper, both levels on the fa2 backend
  ours            monkeybarrel.kernels Triton kernel, default (auto_config: fused or two-stream)
  ours_best       best of a sweep of configs/splits (--sweep; name printed)

Timing ("graph_cold", as in the anchor note): the method is captured in a CUDA graph; before each
replay a 256 MB write flushes L2; median of N replays timed with CUDA events.
Roofline = bytes of prefix K,V once + every suffix K,V, at 3.35 TB/s (H100 SXM HBM3).

Run:  python benchmarks/prefix_attention.py [--cases "B,P,S;..."] [--out results.json] [--no-flex]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monkeybarrel.kernels.reference import roofline_bytes  # noqa: E402

HQ, HKV, D = 32, 8, 128
G = HQ // HKV
HBM_BPS = 3.35e12
DEFAULT_CASES = ";".join(f"{b},{p},{s}" for b in (64, 256, 512) for p in (2048, 4096, 8192) for s in (128, 256))
FLEX_CASES = "64,2048,256;256,4096,256;512,8192,128"


# ----------------------------------------------------------------------------------------- timing
_FLUSH: torch.Tensor | None = None


def flush_l2() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    _FLUSH.zero_()


def time_graph_cold(fn: Callable[[], object], iters: int = 30) -> float:
    """Median ms of CUDA-graph replays of fn, L2 flushed before each."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        flush_l2()
        st[i].record()
        g.replay()
        en[i].record()
    torch.cuda.synchronize()
    del g
    return statistics.median(a.elapsed_time(b) for a, b in zip(st, en))


# ----------------------------------------------------------------------------------------- methods
def attn_lse(q, k, v):  # q [H, M, D], k/v [H, N, D] -> out [H, M, D], lse [H, M]  (the anchor's)
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, -1)
    return torch.matmul(torch.softmax(s, -1).to(v.dtype), v), lse


def make_torch_hydragen(q, kp, vp, ks, vs):
    B, S = ks.shape[0], ks.shape[2]

    def hydra():
        qh = q.view(B, HKV, G, D).permute(1, 0, 2, 3).reshape(HKV, B * G, D)
        op, lp = attn_lse(qh, kp, vp)
        os_, ls = attn_lse(q.view(B * HKV, G, D), ks.reshape(B * HKV, S, D), vs.reshape(B * HKV, S, D))
        op = op.view(HKV, B, G, D).permute(1, 0, 2, 3).reshape(B * HKV, G, D)
        lp = lp.view(HKV, B, G).permute(1, 0, 2).reshape(B * HKV, G)
        m = torch.maximum(lp, ls)
        wp, ws = torch.exp(lp - m), torch.exp(ls - m)
        return ((op.float() * wp[..., None] + os_.float() * ws[..., None]) / (wp + ws)[..., None]).to(q.dtype)

    return hydra


def make_flex(q, kp, vp, ks, vs, flex_fn):
    """FlexAttention on KV packed once per head [1, Hkv, P + B*S, D]; rows (sequence, group head)."""
    from torch.nn.attention.flex_attention import BlockMask

    B, S, P = ks.shape[0], ks.shape[2], kp.shape[1]
    kpk = torch.cat([kp, ks.permute(1, 0, 2, 3).reshape(HKV, B * S, D)], 1).unsqueeze(0).contiguous()
    vpk = torch.cat([vp, vs.permute(1, 0, 2, 3).reshape(HKV, B * S, D)], 1).unsqueeze(0).contiguous()
    QB = KB = 128
    NQ, NKV = B * G, P + B * S
    nqb, nkvb, spb, npb = NQ // QB, NKV // KB, QB // G, P // KB
    full_num = torch.full((1, 1, nqb), npb, dtype=torch.int32)
    full_idx = torch.zeros((1, 1, nqb, nkvb), dtype=torch.int32)
    full_idx[..., :npb] = torch.arange(npb, dtype=torch.int32)
    per_q = spb * S // KB
    part_num = torch.full((1, 1, nqb), per_q, dtype=torch.int32)
    part_idx = torch.zeros((1, 1, nqb, nkvb), dtype=torch.int32)
    for i in range(nqb):
        first = (P + i * spb * S) // KB
        part_idx[0, 0, i, :per_q] = torch.arange(first, first + per_q, dtype=torch.int32)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx < P) | ((kv_idx - P) // S == q_idx // G)

    dev = q.device
    bm = BlockMask.from_kv_blocks(part_num.to(dev), part_idx.to(dev), full_num.to(dev), full_idx.to(dev),
                                  BLOCK_SIZE=(QB, KB), mask_mod=mask_mod, seq_lengths=(NQ, NKV))
    qf = q.view(B, HKV, G, D).permute(1, 0, 2, 3).reshape(1, HKV, B * G, D).contiguous()
    return lambda: flex_fn(qf, kpk, vpk, block_mask=bm), (kpk, vpk)


def make_flashinfer(q, kp, vp, ks, vs, log):
    """FlashInfer peers (as in reference/prefix_attn_peers.py): paged cache, page 16, NHD."""
    import flashinfer

    B, S, P = ks.shape[0], ks.shape[2], kp.shape[1]
    dev, dt = q.device, q.dtype
    page = 16
    npp, nsp = P // page, S // page
    cache = torch.empty(npp + B * nsp, 2, page, HKV, D, dtype=dt, device=dev)
    cache[:npp, 0] = kp.transpose(0, 1).reshape(npp, page, HKV, D)
    cache[:npp, 1] = vp.transpose(0, 1).reshape(npp, page, HKV, D)
    cache[npp:, 0] = ks.permute(0, 2, 1, 3).reshape(B * nsp, page, HKV, D)
    cache[npp:, 1] = vs.permute(0, 2, 1, 3).reshape(B * nsp, page, HKV, D)
    i32 = dict(dtype=torch.int32, device=dev)
    q3 = q.view(B, HQ, D)
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device=dev)
    uniq = (torch.arange(B + 1, **i32) * nsp, npp + torch.arange(B * nsp, **i32), torch.full((B,), page, **i32))
    out = {}
    try:
        k_sh, v_sh = kp.transpose(0, 1).contiguous(), vp.transpose(0, 1).contiguous()
        dw = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
        dw.plan(*uniq, HQ, HKV, D, page, q_data_type=dt, kv_data_type=dt)

        def prefix_decode():
            o_p, l_p = flashinfer.single_prefill_with_kv_cache(q3, k_sh, v_sh, causal=False, return_lse=True)
            o_s, l_s = dw.run(q3, cache, return_lse=True)
            flashinfer.merge_state_in_place(o_p, l_p, o_s, l_s)
            return o_p

        out["fi_prefix_decode"] = prefix_decode
    except Exception as e:  # noqa: BLE001
        log(f"    fi_prefix_decode setup FAILED: {type(e).__name__}: {str(e)[-300:]}")
    try:
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, ws, "NHD")
        w._batch_prefill_wrappers = [flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
                                     for _ in range(2)]
        w.plan([torch.tensor([0, B], **i32), torch.arange(B + 1, **i32)],
               [torch.tensor([0, npp], **i32), uniq[0]], [torch.arange(npp, **i32), uniq[1]],
               [torch.tensor([page], **i32), uniq[2]], HQ, HKV, D, page, causal=False, q_data_type=dt,
               kv_data_type=dt)
        out["fi_cascade_fa2"] = lambda: w.run(q3, cache)
    except Exception as e:  # noqa: BLE001
        log(f"    fi_cascade_fa2 setup FAILED: {type(e).__name__}: {str(e)[-300:]}")
    return out, (cache, ws)


def sweep_configs():
    """(name, config) pairs for the 'ours_best' sweep: the candidate tilings x prefix splits."""
    from monkeybarrel.kernels.hydragen_launch import candidate_configs

    out = []
    for i, cfg in enumerate(candidate_configs(D)):
        for nsp in (0, 1, 2, 4, 8):
            c = dataclasses.replace(cfg, prefix_splits=nsp)
            out.append((f"c{i}:{cfg.mode},bm{cfg.block_m},bns{cfg.block_ns or 'auto'},nreg{cfg.maxnreg},"
                        f"st{cfg.num_stages},im{int(cfg.inline_merge)},nsp{nsp or 'auto'}", c))
    return out


# ----------------------------------------------------------------------------------------- driver
def run_case(B, P, S, args, flex_fn, fi_ok, log):
    from monkeybarrel.kernels.hydragen_launch import (
        _num_sms,
        auto_config,
        default_config,
        hydragen_decode_attention,
        plan,
        prepare,
        streams_config,
    )

    dt, dev = torch.bfloat16, "cuda"
    torch.manual_seed(0)
    q = torch.randn(B, HQ, D, device=dev, dtype=dt)
    kp = torch.randn(HKV, P, D, device=dev, dtype=dt)
    vp = torch.randn_like(kp)
    ks = torch.randn(B, HKV, S, D, device=dev, dtype=dt)
    vs = torch.randn_like(ks)
    lens = torch.full((B,), S, dtype=torch.int32, device=dev)
    roof_ms = roofline_bytes(B, P, S, HKV, D) / HBM_BPS * 1e3
    res = {"B": B, "P": P, "S": S, "roofline_ms": roof_ms, "methods": {}}
    cfg0 = auto_config(B, HQ, HKV, D, P, S)
    pl = plan(B, HKV, G, P, S, cfg0, _num_sms(0))
    log(f"case B={B} P={P} S={S}: roofline {roof_ms:.4f} ms; default mode {cfg0.mode}, plan {pl}")
    res["default_mode"] = cfg0.mode

    q4 = q.unsqueeze(2)
    kfull = torch.cat([kp.unsqueeze(0).expand(B, -1, -1, -1), ks], 2).contiguous()
    vfull = torch.cat([vp.unsqueeze(0).expand(B, -1, -1, -1), vs], 2).contiguous()
    sdpa = lambda: F.scaled_dot_product_attention(q4, kfull, vfull, enable_gqa=True)  # noqa: E731
    ref = sdpa().view(B, HQ, D).float()

    def record(name, fn, iters=args.iters, to_ref=lambda o: o.reshape(B, HQ, D)):
        entry = {}
        try:
            o = fn()
            entry["maxerr_vs_sdpa"] = (to_ref(o).float() - ref).abs().max().item()
            entry["ms"] = time_graph_cold(fn, iters)
            entry["pct_roofline"] = 100 * roof_ms / entry["ms"]
        except Exception as e:  # noqa: BLE001
            entry["error"] = f"{type(e).__name__}: {str(e)[-600:]}"
            if args.verbose:
                traceback.print_exc()
        res["methods"][name] = entry
        if "ms" in entry:
            log(f"  {name:34s} {entry['ms']:8.4f} ms  {entry['pct_roofline']:5.1f}% roof  err {entry['maxerr_vs_sdpa']:.1e}")
        else:
            log(f"  {name:34s} ERROR {entry['error'][:300]}")
        return entry

    record("sdpa", sdpa, iters=8 if B * P > 256 * 8192 else args.iters)
    del kfull, vfull
    torch.cuda.empty_cache()
    record("torch_hydragen", make_torch_hydragen(q, kp, vp, ks, vs))

    if flex_fn is not None and f"{B},{P},{S}" in args.flex_cases.split(";"):
        t0 = time.time()
        try:
            fn, keep = make_flex(q, kp, vp, ks, vs, flex_fn)
            fn()
            torch.cuda.synchronize()
            log(f"    flex compile {time.time() - t0:.1f}s")
            # flex output is [1, Hkv, B*G, D] with rows (sequence, group head): unfold to [B, Hq, D]
            record("flex_packed", fn, to_ref=lambda o: o.view(HKV, B, G, D).permute(1, 0, 2, 3).reshape(B, HQ, D))
            del keep
        except Exception as e:  # noqa: BLE001
            log(f"    flex FAILED {type(e).__name__}: {str(e)[-300:]}")

    if fi_ok:
        fis, keep = make_flashinfer(q, kp, vp, ks, vs, log)
        for name, fn in fis.items():
            record(name, fn)
        del keep, fis

    out = torch.empty(B, HQ, D, device=dev, dtype=dt)
    record("ours", lambda: hydragen_decode_attention(q, kp, vp, ks, vs, lens, out=out))
    if f"{B},{P},{S}" in args.diag_cases.split(";"):
        # the parts alone: prefix tiles, suffix tiles (their own launch), merge, and the full step
        suffix_bytes = 2 * B * S * HKV * D * 2
        prefix_flops = 4 * B * HQ * P * D
        for cname, cfg in (("fused", default_config(D)), ("streams", streams_config(D))):
            la = prepare(q, kp, vp, ks, vs, lens, config=cfg, out=out)
            for part in ("prefix", "suffix", "merge", "fused", "run"):
                if part == "fused" and cfg.mode != "fused":
                    continue
                try:
                    t = time_graph_cold(getattr(la, part), args.iters)
                except Exception as e:  # noqa: BLE001
                    log(f"    diag {cname} {part}: ERROR {type(e).__name__}: {str(e)[:200]}")
                    continue
                extra = (f" suffix {suffix_bytes / t / 1e9:.2f} TB/s" if part == "suffix" else
                         f" prefix {prefix_flops / t / 1e9:.0f} TFLOP/s" if part == "prefix" else "")
                log(f"    diag {cname:8s} {part:7s} {t:.4f} ms{extra}")
                res.setdefault("diag", {})[f"{cname}.{part}"] = t
    if args.sweep:
        best = None
        for name, cfg in sweep_configs():
            e = record("sweep " + name, lambda cfg=cfg: hydragen_decode_attention(q, kp, vp, ks, vs, lens, out=out,
                                                                                 config=cfg), iters=15)
            if "ms" in e and (best is None or e["ms"] < best[1]["ms"]):
                best = (name, e)
        if best:
            e = record("ours_best", lambda: hydragen_decode_attention(q, kp, vp, ks, vs, lens, out=out,
                                                                      config=dict(sweep_configs())[best[0]]))
            e["config"] = best[0]
            log(f"    ours_best = {best[0]}")
    sd = res["methods"]["sdpa"].get("ms")
    for m in res["methods"].values():
        if sd and m.get("ms"):
            m["speedup_vs_sdpa"] = sd / m["ms"]
    torch.cuda.empty_cache()
    return res


def summary(results, log):
    cols = ["sdpa", "torch_hydragen", "flex_packed", "fi_prefix_decode", "fi_cascade_fa2", "ours", "ours_best"]
    log("\nsummary: graph_cold ms [speedup vs SDPA | % of shared-prefix HBM roofline]; "
        "fi_best/ours = FlashInfer best time / ours (>1: ours faster)")
    log("| B,P,S | roofline | " + " | ".join(cols) + " | fi_best/ours | fi_best/ours_best |")
    log("|" + "---|" * (len(cols) + 4))
    for r in results:
        ms = r["methods"]
        cells = []
        for c in cols:
            m = ms.get(c, {})
            cells.append(f"{m['ms']:.4f} [{m.get('speedup_vs_sdpa', 0):.2f}x, {m['pct_roofline']:.0f}%]"
                         if "ms" in m else ("-" if not m else "ERR"))
        fi = [ms[k]["ms"] for k in ("fi_prefix_decode", "fi_cascade_fa2") if "ms" in ms.get(k, {})]
        ratio = lambda k: f"{min(fi) / ms[k]['ms']:.2f}" if fi and "ms" in ms.get(k, {}) else "-"  # noqa: E731
        log(f"| {r['B']},{r['P']},{r['S']} | {r['roofline_ms']:.4f} | " + " | ".join(cells)
            + f" | {ratio('ours')} | {ratio('ours_best')} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--flex-cases", default=FLEX_CASES)
    ap.add_argument("--diag-cases", default="64,2048,256;256,4096,256;512,8192,128")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--no-flashinfer", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    import triton

    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    flex_fn = None
    if not args.no_flex:
        try:
            import torch._dynamo as dynamo
            from torch.nn.attention.flex_attention import flex_attention

            for k in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                      "accumulated_cache_size_limit"):
                if hasattr(dynamo.config, k):
                    setattr(dynamo.config, k, 256)
            flex_fn = torch.compile(flex_attention, dynamic=False)
        except Exception as e:  # noqa: BLE001
            log(f"flex unavailable: {e}")
    fi_ok = False
    if not args.no_flashinfer:
        try:
            import flashinfer

            meta["flashinfer"] = flashinfer.__version__
            fi_ok = True
        except Exception as e:  # noqa: BLE001
            log(f"flashinfer unavailable: {type(e).__name__}: {e}")
    log("meta " + json.dumps(meta))
    results = []
    for c in args.cases.split(";"):
        B, P, S = (int(x) for x in c.split(","))
        t0 = time.time()
        results.append(run_case(B, P, S, args, flex_fn, fi_ok, log))
        log(f"  case wall {time.time() - t0:.1f}s")
        if args.out:
            Path(args.out).write_text(json.dumps({"meta": meta, "cases": results}, indent=1))
    summary(results, log)


if __name__ == "__main__":
    main()

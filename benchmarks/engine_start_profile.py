"""Where an engine's start goes, function by function (issues #31, #32): the ``vllm`` sampler's engine start under
cProfile, on the GPU machine.

The data-parallel job's last worker spends ~13 s starting its engine once vLLM is imported (weights 2.0 s,
CUDA graphs 3.2 s, "KV cache and warm-up" 7.0 s, the rest unnamed by vLLM's own timings). Here one process per
start imports vLLM (timed), then starts the sampler's engine exactly as a Ray worker does (``VLLMSampler.load``
with the engine core in the process, the worker's engine options: the ``--preset`` Llama shape with random
weights, ``max_model_len`` 4096, 0.85 of the GPU, our attention, no torch.compile) under cProfile. ``--runs 2``
starts twice with one ``--engine-cache``: empty, then filled (what a node with a shipped cache pays). Each start
prints and writes the profile's functions by cumulative and by own time (``start_<i>.txt``) and a summary line:
its ``engine_start_s``, ``import_s`` and the phases vLLM logs; ``--compare-freeze`` adds a cached start without
the sampler's ``gc.freeze`` before the engine starts. cProfile slows Python-heavy parts (not GPU
waits): compare phases with unprofiled starts (``worker_*`` figures of benchmarks/ray_gpu.py).

    python benchmarks/engine_start_profile.py --preset 8b --tokenizer DIR --engine-cache DIR --out-dir DIR
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from child_result import emit, parse  # noqa: E402
from model_shapes import PRESETS, shape_dir  # noqa: E402


class WhoCalls:
    """While entered, times every call of ``gc.collect`` and of TorchScript's compiler (``torch.jit.frontend.
    build_def``) by the wall clock and the stack that made it: the two own-time leaders of cProfile's table for a
    cached 8B start, which names neither caller. (The compiler's own time there was the thread waiting for the
    interpreter lock while vLLM's other threads ran: ~1 ms a call by the wall clock.)"""

    def __init__(self, depth: int = 10) -> None:
        self.depth, self.seconds, self.calls = depth, {}, {}

    def _wrap(self, fn):
        def timed(*args, **kwargs):
            frames = traceback.extract_stack(limit=self.depth + 1)[:-1]
            key = " <- ".join(f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in reversed(frames))
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - began
                self.calls[key] = self.calls.get(key, 0) + 1
        return timed

    def __enter__(self) -> "WhoCalls":
        import torch.jit.frontend as frontend

        self._saved = [(gc, "collect", gc.collect), (frontend, "build_def", frontend.build_def)]
        for owner, name, fn in self._saved:
            setattr(owner, name, self._wrap(fn))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, fn in self._saved:
            setattr(owner, name, fn)

    def table(self) -> str:
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        return "\n\nseconds  calls  stack (callee first)\n" + "\n".join(
            f"{secs:7.3f} {self.calls[key]:6d}  {key}" for key, secs in rows)


def profile_start(model: str, cache: str, samples: int, out: Path, attention: str = "monkeybarrel",
                  freeze: bool = True) -> dict:
    """One engine start in this process under cProfile; its figures, the profile written to ``out``. ``freeze``
    False makes ``gc.freeze`` a no-op in this process: the start as it was before the sampler froze the heap."""
    if not freeze:
        gc.freeze = lambda: None
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # as in a Ray worker (ray_pool.ENGINE_IN_ACTOR)
    began = time.perf_counter()
    import torch  # noqa: F401
    torch_s = time.perf_counter() - began
    from vllm import LLM  # noqa: F401
    vllm_s = time.perf_counter() - began - torch_s

    from monkeybarrel.core.config import GeneratorSpec
    from monkeybarrel.samplers.vllm_offline import VLLMSampler

    sampler = VLLMSampler(GeneratorSpec(id="g", model=model, num_samples=samples, max_tokens=256),
                          dtype="bfloat16", gpu_memory_utilization=0.85, max_model_len=4096,
                          engine_kwargs={"load_format": "dummy"}, attention=attention, engine_cache=cache)
    who = WhoCalls()
    profiler = cProfile.Profile()
    with who:
        profiler.enable()
        sampler.load()
        profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(70)
    stats.sort_stats("tottime").print_stats(40)
    out.write_text(text.getvalue() + who.table())
    result = {"gc_freeze": freeze, "torch_import_s": round(torch_s, 2), "vllm_import_s": round(vllm_s, 2),
              "engine_start_s": sampler.engine_start_s, "import_s": sampler.import_s, **sampler.start_phases}
    sampler.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="8b", choices=sorted(PRESETS))
    ap.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's tokenizer files")
    ap.add_argument("--engine-cache", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=256, help="samples a problem (the engine's expected sharing)")
    ap.add_argument("--runs", type=int, default=2, help="starts, one process each, sharing --engine-cache")
    ap.add_argument("--out-dir", type=Path, default=Path("/tmp/engine_start_profile"))
    ap.add_argument("--attention", default="monkeybarrel", help="vllm: vLLM's own (e.g. to try the script on CPU)")
    ap.add_argument("--compare-freeze", action="store_true",
                    help="one more start (cached) without the sampler's gc.freeze before the engine starts")
    ap.add_argument("--no-freeze", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # MODEL OUT: one start, in this process
    args = ap.parse_args()
    if args.one:
        result = profile_start(args.one[0], str(args.engine_cache), args.samples, Path(args.one[1]), args.attention,
                               freeze=not args.no_freeze)
        emit(result)
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model = shape_dir(args.preset, args.out_dir / f"{args.preset}_model", args.tokenizer)
    results = []
    for run in range(args.runs + args.compare_freeze):
        out = args.out_dir / f"start_{run}.txt"
        proc = subprocess.run([sys.executable, __file__, "--tokenizer", str(args.tokenizer), "--engine-cache",
                               str(args.engine_cache), "--samples", str(args.samples), "--attention", args.attention,
                               *(["--no-freeze"] if run >= args.runs else []), "--one", str(model), str(out)],
                              capture_output=True, text=True)
        result = parse(proc.stdout)
        if proc.returncode or result is None:
            sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
            results.append({"run": run, "failed": proc.returncode})
            continue
        results.append({"run": run, **result})
        print(json.dumps(results[-1]), flush=True)
    (args.out_dir / "starts.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

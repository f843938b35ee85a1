"""Output tokens/s of the embedded sampler against plain HF ``generate`` on the same model and settings.

Both sample ``--samples`` completions for each of ``--problems`` arithmetic problems with the
same chat prompt, temperature, top_p and max_tokens, on the same CPU threads, in one process:

- ours: ``EmbeddedSampler.sample`` (one prefill per prompt, requests batched across problems,
  finished rows leave the batch);
- HF loop: for each problem, ``model.generate(prompt, do_sample=True, num_return_sequences=n)``,
  the usual way to draw n samples with transformers;
- HF one-by-one: ``generate`` once per sample (reported with ``--one-by-one``; slow).

Prints tokens/s of each and the ratio ours / HF (target >= 1.0x).

    python benchmarks/sampler_throughput.py --problems 8 --samples 16 --max-tokens 128
"""

from __future__ import annotations

import argparse
import time

import torch

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.samplers.base import SampleRequest
from monkeybarrel.samplers.embedded import EmbeddedSampler
from monkeybarrel.tasks.arithmetic import ArithmeticTask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--samples", type=int, default=16, help="completions per problem")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    parser.add_argument("--max-batch", type=int, default=64, help="most rows the embedded sampler decodes together")
    parser.add_argument("--one-by-one", action="store_true", help="also time one generate() call per sample")
    parser.add_argument("--repeats", type=int, default=2,
                        help="alternate ours / HF this many times and keep each one's best (the machine may be shared)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    spec = GeneratorSpec(num_samples=args.samples, temperature=args.temperature, top_p=args.top_p,
                         max_tokens=args.max_tokens)
    sampler = EmbeddedSampler(spec, max_batch=args.max_batch)
    sampler.load()
    problems = ArithmeticTask(num_problems=args.problems, seed=0, difficulty=2).load()
    requests = [SampleRequest(p, tuple(range(args.samples)), seed=i) for i, p in enumerate(problems)]

    model, tokenizer = sampler.model, sampler.tokenizer
    eos = set(sampler._eos.tolist())
    settings = dict(do_sample=args.temperature > 0, temperature=args.temperature, top_p=args.top_p, top_k=None,
                    max_new_tokens=args.max_tokens, pad_token_id=sampler._pad)

    def count(generated: torch.Tensor, prompt_len: int) -> int:
        total = 0
        for row in generated[:, prompt_len:].tolist():
            for token in row:
                if token in eos:
                    break
                total += 1
        return total

    def ours() -> tuple[int, float]:
        began = time.perf_counter()
        tokens = sum(c.completion_tokens for batch in sampler.sample(requests) for c in batch)
        return tokens, time.perf_counter() - began

    def hf() -> tuple[int, float]:
        torch.manual_seed(0)
        began, tokens = time.perf_counter(), 0
        with torch.inference_mode():
            for request in requests:
                prompt = sampler.encode(request)[None]
                out = model.generate(prompt, num_return_sequences=args.samples, **settings)
                tokens += count(out, prompt.shape[1])
        return tokens, time.perf_counter() - began

    runs_ours, runs_hf = [], []
    for _ in range(args.repeats):
        runs_ours.append(ours())
        runs_hf.append(hf())
    ours_tokens, ours_s = max(runs_ours, key=lambda r: r[0] / r[1])
    hf_tokens, hf_s = max(runs_hf, key=lambda r: r[0] / r[1])

    print(f"model {spec.model}, {args.problems} problems x {args.samples} samples, max_tokens {args.max_tokens}, "
          f"T={args.temperature}, top_p={args.top_p}, {args.threads} threads")
    print(f"embedded sampler : {ours_tokens:6d} tokens in {ours_s:7.1f} s = {ours_tokens / ours_s:7.1f} tok/s")
    print(f"HF generate (n)  : {hf_tokens:6d} tokens in {hf_s:7.1f} s = {hf_tokens / hf_s:7.1f} tok/s")
    print(f"ratio ours / HF generate(num_return_sequences=n): {(ours_tokens / ours_s) / (hf_tokens / hf_s):.2f}x")

    if args.one_by_one:
        began, single_tokens = time.perf_counter(), 0
        with torch.inference_mode():
            for request in requests:
                prompt = sampler.encode(request)[None]
                for _ in range(args.samples):
                    single_tokens += count(model.generate(prompt, **settings), prompt.shape[1])
        single_s = time.perf_counter() - began
        print(f"HF generate x1   : {single_tokens:6d} tokens in {single_s:7.1f} s = {single_tokens / single_s:7.1f} tok/s")
        print(f"ratio ours / HF generate one sample at a time: {(ours_tokens / ours_s) / (single_tokens / single_s):.2f}x")


if __name__ == "__main__":
    main()

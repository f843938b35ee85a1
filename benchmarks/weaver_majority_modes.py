"""Why Weaver fits the majority evidence jointly: the two modes of ``main`` against each other, once the scores
keep their bins.

Until issue #34 Weaver chose between two uses of the answer shares: ``joint`` (fitted with the verifiers) and
``checked`` (the label fitted on the verifiers alone, each stratum's shares taken only as far as that
posterior supports them), by tests whose outcome flipped with the number of samples. This script runs the
package at ``--before`` (default ``main``) with 8 bins per verifier (``model__n_bins: 8``, close to the
binning that is now the default) and each mode forced, beside the default Weaver of this tree, on the kinds
of issue #26, the families of #34 and weak verifiers at 8 to 100 samples per problem (several instances
each; the yardstick is the naive-Bayes oracle of #26 or the exact posterior of #34).

    python benchmarks/weaver_majority_modes.py [--seeds 4] [--before main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

RUN_SCRIPT = """
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
from weaver_families import load
import monkeybarrel.selection.weaver as W
from monkeybarrel.core.metrics import selection_accuracy
warnings.simplefilter("ignore")
FORCE = {"joint": (-1.0, 2.0), "checked": (2.0, float("inf"))}  # (SANITY_MARGIN, MAX_RIGHT_ANSWERS)
out = {}
for path in sys.argv[2:]:
    data, labels = load(path)
    for mode, (margin, most) in FORCE.items():
        W.SANITY_MARGIN, W.MAX_RIGHT_ANSWERS = margin, most
        selector = W.WeaverSelector(model=W.WeaverModel(n_bins=8)).fit(data)
        out[f"{path}:{mode}"] = selection_accuracy(selector.select(data), labels)
print(json.dumps(out))
"""


def main() -> None:
    from monkeybarrel.core.metrics import selection_accuracy
    from monkeybarrel.experiments.weaver_families import Generator, Verifier, draw, exact_accuracy, make_family
    from monkeybarrel.experiments.weaver_synthetic import make_kind, naive_bayes_oracle
    from monkeybarrel.selection.weaver import WeaverSelector
    from weaver_families import save
    from weaver_fit import unpack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--before", default="main")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    def weak(seed: int, samples: int):
        rng = np.random.default_rng([seed, samples])
        generator = Generator(problems=200, samples=samples, hard_share=0.3, attractor=0.4)
        verifiers = [Verifier(f"w{j}", e, e * 0.5, "probability") for j, e in enumerate(rng.uniform(0.3, 0.6, 5))]
        return draw(generator, verifiers, rng)

    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for kind in ("mixed_difficulty", "sparse_ragged", "near_duplicates", "degenerate", "weak_verifiers"):
                data, labels, _ = make_kind(kind, seed)
                cases.setdefault(kind, []).append((data, labels, naive_bayes_oracle(data, labels)["best"]))
            for family in ("judge_where_disagree", "unit_tests_partial"):
                instance = make_family(family, seed)
                cases.setdefault(family, []).append((instance.data, instance.labels, exact_accuracy(instance)))
            for samples in (8, 16, 32, 64, 100):
                instance = weak(seed, samples)
                cases.setdefault(f"weak verifiers, {samples} samples", []).append(
                    (instance.data, instance.labels, exact_accuracy(instance)))
        rows, paths = {}, []
        for name, instances in cases.items():
            for i, (data, labels, reference) in enumerate(instances):
                path = str(Path(tmp) / f"{name.replace(' ', '_').replace(',', '')}-{i}.npz")
                save(data, labels, Path(path))
                paths.append(path)
                rows.setdefault(name, []).append({"path": path, "reference": reference, "now": selection_accuracy(
                    WeaverSelector().fit(data).select(data), labels)})
        package = unpack(args.before, Path(tmp) / "before")
        env = dict(os.environ, PYTHONPATH=str(package), OPENBLAS_NUM_THREADS="1")
        here = str(Path(__file__).resolve().parent)
        out = subprocess.run([sys.executable, "-c", RUN_SCRIPT, here, *paths], capture_output=True, text=True,
                             check=True, cwd=package, env=env)
        forced = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{args.seeds} instances per row; accuracy (%) averaged; reference = naive-Bayes oracle (#26 kinds) or "
          f"exact posterior (#34 families, weak verifiers)")
    print(f"| data | reference | {args.before}, 8 bins, checked | {args.before}, 8 bins, joint | now (default) |")
    print("|---|---:|---:|---:|---:|")
    for name, instances in rows.items():
        mean = lambda values: 100 * np.mean(values)  # noqa: E731
        print(f"| {name} | {mean([r['reference'] for r in instances]):.1f} | "
              f"{mean([forced[r['path'] + ':checked'] for r in instances]):.1f} | "
              f"{mean([forced[r['path'] + ':joint'] for r in instances]):.1f} | {mean([r['now'] for r in instances]):.1f} |")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

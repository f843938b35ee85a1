"""``report.md`` and ``coverage.png`` from stored metrics (rebuildable with ``monkeybarrel report DIR``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .coverage_plot import draw_law


def _pct(value: float | None) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def render_markdown(name: str, metrics: dict[str, Any], manifest: dict[str, Any], plot_name: str | None) -> str:
    """The report text: summary, coverage / majority table, selection table, costs."""
    lines = [f"# {name}", ""]
    lines.append(f"{metrics.get('n_problems', 0)} problems, {metrics.get('n_candidates', 0)} candidates "
                 f"({metrics['samples_per_problem']['min']}–{metrics['samples_per_problem']['max']} per problem); "
                 f"mean sample accuracy {_pct(metrics.get('sample_accuracy'))} %.")
    lines += ["", "## Coverage and majority vote against k", "",
              "| k | coverage pass@k (%) | majority@k (%) |", "|---:|---:|---:|"]
    for k in metrics.get("ks", []):
        lines.append(f"| {k} | {_pct(metrics['coverage'].get(str(k)))} | {_pct(metrics['majority'].get(str(k)))} |")
    lines += ["", "coverage: unbiased pass@k = 1 - C(n-c,k)/C(n,k); majority@k: mean over random k-subsets "
              "(exact at k = n); truncated or failed samples do not vote.", ""]
    lines += scaling_law_lines(metrics.get("scaling_law", {}))
    curves = metrics.get("accuracy_vs_k", {})
    if curves:
        lines += ["## Selection accuracy against k", "", "| k | coverage (%) | " + " | ".join(f"{m} (%)" for m in curves) + " |",
                  "|---:|---:|" + "---:|" * len(curves)]
        for k in metrics.get("ks", []):
            lines.append(f"| {k} | {_pct(metrics['coverage'].get(str(k)))} | "
                         + " | ".join(_pct(curve.get(str(k))) for curve in curves.values()) + " |")
        lines += ["", "Each selector refitted on random k-subsets of every problem's candidates (the same subsets "
                  "for all), accuracy averaged; exact at k = n.", ""]
    if plot_name:
        lines += [f"![coverage and selection accuracy against k]({plot_name})", ""]
    lines += ["## Selection", "", "| method | accuracy (%) | uses labels | abstained |", "|---|---:|:---:|---:|"]
    notes = []
    for method, info in metrics.get("selection", {}).items():
        lines.append(f"| {method} | {_pct(info['accuracy'])} | {'yes' if info['uses_labels'] else 'no'} | {info['abstained']} |")
        if info.get("heldout"):
            notes.append(f"{method}: {_pct(info['heldout']['accuracy'])} % on the {info['heldout']['problems']} "
                         "problems it was not fitted on")
        notes += [f"{method}: {note}" for note in info.get("notes", [])]
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    if metrics.get("verifiers"):
        lines += ["", "## Verifiers (against the labels: evaluation only)", "",
                  "| verifier | failed (%) | top-1 accuracy (%) | AUROC |", "|---|---:|---:|---:|"]
        for verifier, info in metrics["verifiers"].items():
            auroc = info["auroc"]
            lines.append(f"| {verifier} | {_pct(info['failed'])} | {_pct(info['top1_accuracy'])} | "
                         f"{'–' if math.isnan(auroc) else f'{auroc:.3f}'} |")
    if len(metrics.get("per_generator", {})) > 1:
        lines += ["", "## Per generator", "", "| generator | candidates | sample accuracy (%) | coverage@max k (%) |",
                  "|---|---:|---:|---:|"]
        for generator, info in metrics["per_generator"].items():
            top = max(info["coverage"], key=int) if info["coverage"] else None
            lines.append(f"| {generator} | {info['n_candidates']} | {_pct(info['sample_accuracy'])} | "
                         f"{_pct(info['coverage'].get(top)) if top else '–'} |")
    costs = manifest.get("costs", {})
    if costs:
        generators = costs.get("generators", {})
        gpu = any("gpu_s" in info for info in generators.values())
        lines += ["", "## Cost", "", "| generator | candidates | prompt tokens | completion tokens | sampling wall s | "
                  + ("GPU s | " if gpu else "") + "errors | truncated |",
                  "|---|---:|---:|---:|---:|" + ("---:|" if gpu else "") + "---:|---:|"]
        for generator, info in generators.items():
            if "candidates" not in info:
                continue
            gpu_cell = (f"{info['gpu_s']:.1f} | " if "gpu_s" in info else "– | ") if gpu else ""
            lines.append(f"| {generator} | {info['candidates']} | {info['prompt_tokens']} | {info['completion_tokens']} | "
                         f"{info['sample_wall_s']:.1f} | {gpu_cell}{info['errors']} | {info['truncated']} |")
        if gpu:
            lines += ["", "GPU s: GPUs the sampler held x wall seconds, summed over runs (vllm: engine GPUs while "
                      "generating; ray: GPUs per worker x worker lifetime)."]
        stage_times = costs.get("stage_wall_s", {})
        if stage_times:
            lines += ["", "Stage wall time of the last run (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stage_times.items())]
        if any(costs.get("stage_gpu_s", {}).values()):
            lines += ["Stage GPU time of the last run (GPU s): "
                      + ", ".join(f"{k} {v:.1f}" for k, v in costs["stage_gpu_s"].items())]
    versions = manifest.get("package_versions", {})
    lines += ["", f"Config hash `{manifest.get('config_hash', '?')}`; monkeybarrel {versions.get('monkeybarrel', '?')}, "
              f"torch {versions.get('torch', '?')}, transformers {versions.get('transformers', '?')}."]
    return "\n".join(lines) + "\n"


def _samples(value: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    return "never" if math.isinf(value) else f"{value:,.0f}"


def scaling_law_lines(laws: dict[str, dict[str, float]]) -> list[str]:
    """The "Coverage scaling law" section: a, b, fit error and samples for 50/90/99 % per curve."""
    fitted = {name: law for name, law in laws.items() if not math.isnan(law.get("a", float("nan")))}
    if not fitted:
        return []
    targets = sorted(float(key.split("_")[-1]) for key in next(iter(fitted.values())) if key.startswith("samples_for_"))
    lines = ["## Coverage scaling law", "",
             "| curve | a | b | fit error (mean ± std) | " + " | ".join(f"k for {100 * t:g}%" for t in targets) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(targets)]
    for name, law in fitted.items():
        lines.append(f"| {name} | {law['a']:.3f} | {law['b']:.3f} | {law['error_mean']:.4f} ± {law['error_std']:.4f} | "
                     + " | ".join(_samples(law[f'samples_for_{t}']) for t in targets) + " |")
    k_max = max(law["k_max"] for law in fitted.values())
    lines += ["", f"c(k) = exp(a k^b) (Large Language Monkeys, Eq. 3) fitted to log coverage on k = 1..{k_max:g} "
              "(evenly spaced in log k); fit error = |coverage - fit| over those points; k beyond "
              f"{k_max:g} is a forecast.", ""]
    return lines


def plot_curves(metrics: dict[str, Any], path: Path) -> Path | None:
    """Coverage, majority@k and each selector's accuracy against k (log2 axis) as a PNG; None when there is nothing to plot."""
    ks = metrics.get("ks", [])
    if not ks or not metrics.get("coverage"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(ks, [100 * metrics["coverage"][str(k)] for k in ks], "o-", label="coverage (pass@k)")
    ax.plot(ks, [100 * metrics["majority"][str(k)] for k in ks], "s-", label="majority@k")
    law = metrics.get("scaling_law", {}).get("all")
    if law and not math.isnan(law["a"]):
        draw_law(ax, np.asarray(ks), law["a"], law["b"], color="C0", k_max=law["k_max"],
                 label=f"fit exp({law['a']:.2f} k^{law['b']:.2f})")
    curves = metrics.get("accuracy_vs_k", {})
    colours = plt.get_cmap("tab10").colors
    for index, (name, curve) in enumerate(curves.items()):  # one colour per selector
        points = [(k, 100 * curve[str(k)]) for k in ks if str(k) in curve]
        ax.plot(*zip(*points), ".-", color=colours[(index + 2) % len(colours)], label=name)
    for name, info in metrics.get("selection", {}).items():
        if name not in curves and not info["uses_labels"] and not name.startswith("random"):
            ax.axhline(100 * info["accuracy"], linestyle=":", linewidth=1, label=f"{name} (all samples)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"{metrics['n_problems']} problems")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

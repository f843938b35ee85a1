"""``report.md`` and ``coverage.png`` from stored metrics (rebuildable with ``monkeybarrel report DIR``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .coverage_plot import draw_law, new_figure, save_figure


def pct(value: float | None, interval: list | None = None) -> str:
    """A share as a percentage with enough digits (0.02, not 0.0), and its 95% interval when given."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    text = percent(value)
    return f"{text} [{percent(interval[0])}, {percent(interval[1])}]" if interval else text


_pct = pct


def percent(value: float) -> str:
    """``100 * value`` with one decimal, or two significant digits below 1 % (never a misleading 0.0)."""
    x = 100 * value
    return f"{x:.1f}" if x == 0 or abs(x) >= 1 else f"{x:.2g}"


def render_markdown(name: str, metrics: dict[str, Any], manifest: dict[str, Any], plot_name: str | None) -> str:
    """The report text: summary, coverage / majority table, selection table, costs."""
    lines = [f"# {name}", ""]
    lines.append(f"{metrics.get('n_problems', 0)} problems, {metrics.get('n_candidates', 0)} candidates "
                 f"({metrics['samples_per_problem']['min']}–{metrics['samples_per_problem']['max']} per problem); "
                 f"mean sample accuracy {_pct(metrics.get('sample_accuracy'), metrics.get('sample_accuracy_ci95'))} %.")
    labelled = metrics.get("labelled_candidates", metrics.get("n_candidates", 0))
    if labelled == 0:
        lines += ["", "**No labels stored** (no `labels.parquet`): accuracies cannot be computed and are shown "
                  "as –, not 0 %. `monkeybarrel run` with the same config labels the candidates."]
    elif labelled < metrics.get("n_candidates", 0):
        lines += ["", f"**Only {labelled} of {metrics['n_candidates']} candidates are labelled**; unlabelled "
                  "ones count as wrong. `monkeybarrel run` with the same config labels the rest."]
    lines += ["", "Brackets: 95% percentile bootstrap interval over problems "
              f"({metrics.get('intervals', {}).get('resamples', '?')} resamples)."]
    cov_ci, maj_ci = metrics.get("coverage_ci95", {}), metrics.get("majority_ci95", {})
    lines += ["", "## Coverage and majority vote against k", "",
              "| k | coverage pass@k (%) | majority@k (%) |", "|---:|---:|---:|"]
    for k in metrics.get("ks", []):
        lines.append(f"| {k} | {_pct(metrics['coverage'].get(str(k)), cov_ci.get(str(k)))} | "
                     f"{_pct(metrics['majority'].get(str(k)), maj_ci.get(str(k)))} |")
    lines += ["", "coverage: unbiased pass@k = 1 - C(n-c,k)/C(n,k); majority@k: mean over random k-subsets "
              "(exact at k = n); truncated or failed samples do not vote. random (pass@1): the exact expected "
              "accuracy of a uniformly random pick (mean of correct / samples), not one draw.", ""]
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
        lines.append(f"| {method} | {_pct(info['accuracy'], info.get('ci95'))} | {'yes' if info['uses_labels'] else 'no'} | "
                     f"{info['abstained']} |")
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
            auroc = info.get("auroc")
            lines.append(f"| {verifier} | {_pct(info['failed'])} | {_pct(info.get('top1_accuracy'), info.get('top1_accuracy_ci95'))} | "
                         f"{'–' if auroc is None or math.isnan(auroc) else f'{auroc:.3f}'} |")
    if len(metrics.get("per_generator", {})) > 1:
        lines += ["", "## Per generator", "", "| generator | candidates | sample accuracy (%) | coverage@max k (%) |",
                  "|---|---:|---:|---:|"]
        for generator, info in metrics["per_generator"].items():
            top = max(info["coverage"], key=int) if info["coverage"] else None
            lines.append(f"| {generator} | {info['n_candidates']} | "
                         f"{_pct(info.get('sample_accuracy'), info.get('sample_accuracy_ci95'))} | "
                         f"{_pct(info['coverage'].get(top), info.get('coverage_ci95', {}).get(top)) + f' (k={top})' if top else '–'} |")
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
            wall = info.get("sample_wall_s")
            lines.append(f"| {generator} | {info['candidates']} | {info['prompt_tokens']} | {info['completion_tokens']} | "
                         f"{'–' if wall is None else f'{wall:.1f}'} | {gpu_cell}{info['errors']} | {info['truncated']} |")
        lines += ["", "sampling wall s: the sample stage's wall time per generator, summed over runs."]
        if gpu:
            lines += ["", "GPU s: GPUs the sampler held x wall seconds, summed over runs (vllm: engine GPUs while "
                      "generating; ray: GPUs per worker x worker lifetime)."]
        stage_times = costs.get("stage_wall_s", {})
        if stage_times:
            lines += ["", "Stage wall time of the last run (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stage_times.items())]
        if any(costs.get("stage_gpu_s", {}).values()):
            lines += ["Stage GPU time of the last run (GPU s): "
                      + ", ".join(f"{k} {v:.1f}" for k, v in costs["stage_gpu_s"].items())]
        starts = start_lines((manifest.get("runs") or [{}])[-1].get("sampled") or {})
        if starts:
            lines += ["", "Engine starts in the last run (s):", ""] + starts
    sandboxes = (manifest.get("runs") or [{}])[-1].get("sandbox", [])
    if sandboxes:
        lines += ["", "Sandbox of the last run (untrusted code: labels, code verifiers): "
                  + "; ".join(f"`{s['line']}`" for s in sandboxes)]
    versions = manifest.get("package_versions", {})
    lines += ["", f"Config hash `{manifest.get('config_hash', '?')}`; monkeybarrel {versions.get('monkeybarrel', '?')}, "
              f"torch {versions.get('torch', '?')}, transformers {versions.get('transformers', '?')}."]
    return "\n".join(lines) + "\n"


START_PARTS = (("ray_init_s", "Ray"), ("worker_actor_up_s", "actor up"), ("worker_turn_wait_s", "waiting for its GPU"),
               ("import_s", "import"), ("worker_import_s", "import"), ("engine_start_s", "engine"),
               ("worker_engine_start_s", "engine"))
"""Parts of a start, in the order they happen, as the sample stage records them (a direct vLLM engine: ``import_s``,
``engine_start_s``; Ray: ``ray_init_s`` and the last worker's ``worker_*``)."""


def start_lines(sampled: dict[str, dict[str, Any]]) -> list[str]:
    """One bullet per generator whose engine started in the run: the start's total and its parts, then the phases
    vLLM timed inside the engine's start (``engine_<phase>`` / ``worker_<phase>``)."""
    known = {key for key, _ in START_PARTS} | {"first_worker_ready_s", "worker_init_s", "workers_not_up"}
    lines = []
    for generator, info in sampled.items():
        total = info.get("workers_ready_s", info.get("engine_start_s"))
        if total is None:
            continue
        if "workers_ready_s" not in info:
            total = round(total + (info.get("import_s") or 0.0), 3)
        parts = [f"{label} {info[key]:.1f}" for key, label in START_PARTS if info.get(key) is not None]
        phases = [f"{key.split('_', 1)[1].removesuffix('_s').replace('_', ' ')} {value:.1f}"
                  for key, value in info.items() if key.startswith(("engine_", "worker_")) and key not in known
                  and isinstance(value, (int, float))]
        inside = f"inside the engine: {', '.join(phases)}" if phases else ""
        detail = "; ".join(x for x in (", ".join(parts), inside) if x)
        lines.append(f"- {generator}: {total:.1f}" + (f" ({detail})" if detail else ""))
    return lines


def _fitted(law: dict | None) -> bool:
    """A fitted law (its ``a`` is a number: NaN in memory, null once read back from metrics.json)."""
    return bool(law) and law.get("a") is not None and not math.isnan(law["a"])


def _samples(value: float) -> str:
    if value is None or math.isnan(value):
        return "–"
    return "never" if math.isinf(value) else f"{value:,.0f}"


def scaling_law_lines(laws: dict[str, dict[str, float]]) -> list[str]:
    """The "Coverage scaling law" section: a, b, fit error and samples for 50/90/99 % per curve."""
    fitted = {name: law for name, law in laws.items() if _fitted(law)}
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
    if not ks or not any(v is not None for v in metrics.get("coverage", {}).values()):
        return None
    fig, (ax,) = new_figure(6, 4)
    colours = iter(f"C{i % 10}" for i in range(1000))
    _curve(ax, ks, metrics["coverage"], metrics.get("coverage_ci95"), "o-", "coverage (pass@k)", "C0")
    _curve(ax, ks, metrics["majority"], metrics.get("majority_ci95"), "s-", "majority@k", "C1")
    laws = metrics.get("scaling_law", {})
    if _fitted(laws.get("all")):
        law = laws["all"]
        draw_law(ax, np.asarray(ks), law["a"], law["b"], color="C0", k_max=law["k_max"],
                 label=f"fit exp({law['a']:.2f} k^{law['b']:.2f})")
    next(colours), next(colours)
    generators = metrics.get("per_generator", {})
    if len(generators) > 1:  # each generator's own coverage curve and, when fitted, its law
        for generator, info in generators.items():
            colour = next(colours)
            gen_ks = [k for k in ks if info["coverage"].get(str(k)) is not None]
            _curve(ax, gen_ks, info["coverage"], None, "^-", f"coverage {generator}", colour, linewidth=1, markersize=3)
            if _fitted(laws.get(generator)):
                law = laws[generator]
                draw_law(ax, np.asarray(ks), law["a"], law["b"], color=colour, k_max=law["k_max"])
    curves = metrics.get("accuracy_vs_k", {})
    for name, curve in curves.items():  # one colour per selector
        points = [(k, 100 * curve[str(k)]) for k in ks if curve.get(str(k)) is not None]
        if points:
            ax.plot(*zip(*points), ".-", color=next(colours), label=name)
    for name, info in metrics.get("selection", {}).items():
        if name not in curves and not info["uses_labels"] and info.get("accuracy") is not None:
            colour = next(colours)
            ax.axhline(100 * info["accuracy"], color=colour, linestyle=":", linewidth=1.2,
                       label=f"{name} (expected)" if info.get("type") == "random" else f"{name} (all samples)")
            if info.get("ci95"):
                ax.axhspan(100 * info["ci95"][0], 100 * info["ci95"][1], color=colour, alpha=0.07, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"{metrics['n_problems']} problems")
    return save_figure(fig, path)


def _curve(ax, ks: list[int], values: dict, intervals: dict | None, style: str, label: str, colour: str,
           **kwargs) -> None:
    """One accuracy-against-k line (in %), with its 95% band when ``intervals`` is given."""
    ks = [k for k in ks if values.get(str(k)) is not None]
    if not ks:
        return
    ax.plot(ks, [100 * values[str(k)] for k in ks], style, color=colour, label=label, **kwargs)
    if intervals and all(intervals.get(str(k)) for k in ks):
        ax.fill_between(ks, [100 * intervals[str(k)][0] for k in ks], [100 * intervals[str(k)][1] for k in ks],
                        color=colour, alpha=0.12, linewidth=0)

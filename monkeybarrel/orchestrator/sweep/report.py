"""``monkeybarrel sweep report DIR``: one page comparing a sweep's points on accuracy against compute.

Writes ``DIR/report.md``, ``DIR/report.html`` (self-contained: plot inlined), ``DIR/report.png`` and
``DIR/report.json`` (every figure of the page). Per task (points of one task are compared with each
other): every selector's accuracy and coverage against compute per point and model, with 95%
bootstrap intervals, and the compute-optimal frontier: for each budget, the best (model, k)
configuration and the best one of another model. Nothing is re-selected: each point's
``metrics.json``, per-problem counts and manifest costs are read (``curves``), so the report stays
quick for many points of 10^6 candidates each. A directory without ``sweep.json`` is read as a set
of stores (each sub-directory with a ``config.yaml`` is a point).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rich.console import Console
from rich.markup import escape

from ...core.files import atomic_write_bytes
from ..report.markdown import pct
from ..report.terminal import table
from ..stages.evaluate import to_json
from ..store.experiment_store import StoreError
from .accounting import gpu_seconds, with_starts
from .curves import BUDGET_NAMES, BUDGETS, PointCurves, add_coverage, read_point
from .frontier import best_at, budget_grid, pareto
from .manifest import MANIFEST, read_manifest
from .report_plot import plot_report

MAX_PANELS = 4
"""Metric columns in the plot: coverage and the first three selectors."""


def collect(directory: Path) -> tuple[str, list[PointCurves], dict[str, Any], list[dict[str, str]], dict[str, float]]:
    """(sweep name, curves of every point with a store, engines, points without results, model_params)."""
    manifest = read_manifest(directory)
    spec = _yaml(directory / "sweep.yaml")
    known = {str(k): float(v) for k, v in (spec.get("model_params") or {}).items()}
    if manifest:
        records = sorted(manifest["points"], key=lambda r: r.get("index", 0))
    elif directory.is_dir():
        records = [{"name": p.name, "state": "done", "overrides": {}} for p in sorted(directory.iterdir())
                   if (p / "config.yaml").is_file()]
    else:
        records = []
    if not records:
        raise StoreError(f"{directory}: no sweep here (no {MANIFEST} and no experiment stores in it)")
    points, missing = [], []
    shared = gpu_seconds(directory, records)
    engines = with_starts(manifest.get("engines", {}), shared)
    for record in records:
        point = read_point(directory / record["name"], record["name"], record.get("state", "pending"),
                           record.get("overrides", {}), known, shared["points"].get(record["name"], {}).get("gpu_s"))
        if point is None or not point.ks.size:
            missing.append({"name": record["name"], "state": record.get("state", "pending")})
        else:
            points.append(point)
    return manifest.get("name") or directory.name, points, engines, missing, known


def build_report(directory: str | Path, budget: str | None = None) -> dict[str, Any]:
    """Every figure of the report as plain data (see ``write_report``)."""
    directory = Path(directory)
    name, points, engines, missing, known = collect(directory)
    tasks: dict[str, list[PointCurves]] = {}
    for point in points:
        tasks.setdefault(point.task, []).append(point)
    for group in tasks.values():
        add_coverage(group)
    available = [b for b in BUDGETS if points and all(np.isfinite(p.budget(b, np.ones(1))[0]) for p in points)]
    if budget is not None and budget not in available:
        lacking = [p.name for p in points if not np.isfinite(p.budget(budget, np.ones(1))[0])]
        raise StoreError(f"{directory}: budget {budget!r} is not known for point(s) {lacking[:5]} "
                         f"({_why(budget)}); available: {available}")
    kind = budget or (available[0] if available else "samples")
    models = {p.model: p.params for p in points}
    return {"name": name, "directory": str(directory), "budget": kind, "budget_name": BUDGET_NAMES[kind],
            "budgets_available": available, "tasks": [_task(group, kind) for group in tasks.values()],
            "engines": engines, "missing": missing,
            "params": {m: (None if math.isnan(v) else v) for m, v in models.items()},
            "params_given": sorted(set(known) & set(models))}


def _why(budget: str) -> str:
    return {"flops": "model size unknown: add `model_params: {MODEL: N}` to the sweep file, or a size in the name",
            "gpu_s": "no GPU-seconds recorded: CPU backends record none",
            "tokens": "no token counts stored"}.get(budget, "")


def _task(points: list[PointCurves], kind: str) -> dict[str, Any]:
    """One task's point table and frontiers."""
    metrics = ["coverage"] + list(dict.fromkeys(m for p in points for m in p.curves if m != "coverage"))
    size = {p.model: p.params for p in points}
    models = sorted(size, key=lambda m: (math.isnan(size[m]), size[m] if not math.isnan(size[m]) else 0, m))  # small first
    by = "model" if len(models) > 1 else "point"  # the runner-up comes from another model, or another point

    def owner(point: PointCurves) -> str:
        return point.model if by == "model" else point.name

    code = {name: i for i, name in enumerate(sorted({owner(p) for p in points}))}
    rows = []
    for point in points:
        for i, k in enumerate(point.ks):
            rows.append((point, i, int(k), float(point.budget(kind)[i])))
    cost = np.array([r[3] for r in rows])
    group = np.array([code[owner(r[0])] for r in rows])
    frontiers = {}
    for metric in metrics:
        accuracy = np.array([r[0].curves.get(metric, np.full(r[0].ks.size, np.nan))[r[1]] for r in rows])
        if np.isnan(accuracy).all():
            continue
        front = pareto(cost, accuracy)
        budgets = budget_grid(float(np.nanmin(cost[~np.isnan(accuracy)])), float(np.nanmax(cost[~np.isnan(accuracy)])))
        best, other = best_at(cost, accuracy, group, budgets)
        frontiers[metric] = {
            "pareto": [_config(rows[i], metric) for i in front],
            "table": [{"budget": float(b), "best": _config(rows[i], metric) if i >= 0 else None,
                       "other": _config(rows[j], metric) if j >= 0 else None} for b, i, j in zip(budgets, best, other)],
        }
    return {"task": points[0].task_label, "metrics": [m for m in metrics if m in frontiers], "other": by,
            "points": [_point_row(p, kind) for p in points], "frontier": frontiers, "models": models,
            "curves": [{"point": p.name, "model": p.model, "ks": p.ks.tolist(), "budget": p.budget(kind).tolist(),
                        "accuracy": {m: v.tolist() for m, v in p.curves.items()},
                        "ci95": {m: v.tolist() for m, v in p.intervals.items()}} for p in points]}


def _config(row: tuple[PointCurves, int, int, float], metric: str) -> dict[str, Any]:
    point, i, k, cost = row
    band = point.intervals.get(metric)
    interval = None if band is None or np.isnan(band[i]).any() else [float(band[i][0]), float(band[i][1])]
    return {"point": point.name, "model": point.model, "k": k, "cost": cost,
            "accuracy": float(point.curves[metric][i]), "ci95": interval}


def _point_row(point: PointCurves, kind: str) -> dict[str, Any]:
    """A point at all its samples: compute and each metric with its interval."""
    last = point.ks.size - 1
    samples = float(point.n.mean()) if point.n.size else float(point.ks[-1])
    metrics = {}
    for metric, curve in point.curves.items():
        band = point.intervals.get(metric)
        ok = band is not None and not np.isnan(band[last]).any()
        metrics[metric] = {"accuracy": None if np.isnan(curve[last]) else float(curve[last]),
                           "ci95": [float(band[last][0]), float(band[last][1])] if ok else None}
    return {"point": point.name, "model": point.model, "state": point.state, "overrides": point.overrides,
            "problems": int(point.n.size), "candidates": point.candidates, "samples_per_problem": samples,
            "tokens_per_problem": _finite(samples * point.completion_tokens),
            "gpu_s": _finite(point.gpu_s_per_sample * point.candidates), "cost": _finite(float(point.budget(kind)[last])),
            "metrics": metrics}


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


# ---- rendering ---------------------------------------------------------------------------------

def write_report(directory: str | Path, budget: str | None = None) -> dict[str, Any]:
    """Build and write ``report.md``, ``report.html``, ``report.png`` and ``report.json`` under ``directory``."""
    directory = Path(directory)
    report = build_report(directory, budget)
    plot = plot_report(report, directory / "report.png")
    report["plot"] = plot.name if plot else None
    atomic_write_bytes(directory / "report.json", to_json(report).encode())
    atomic_write_bytes(directory / "report.md", render_markdown(report).encode())
    atomic_write_bytes(directory / "report.html", render_html(report, plot).encode())
    return report


def _tables(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(heading level, title, header, rows) of every table of the page, in order."""
    out = []
    unit = report["budget_name"]
    for task in report["tasks"]:
        for metric in task["metrics"]:
            title = f"{task['task']}: best configuration per budget, {_metric_name(metric)}"
            several = len(task["models"]) > 1
            rows = [[_num(r["budget"]), *_best(r["best"], several), *_other(r["other"], several)]
                    for r in task["frontier"][metric]["table"]]
            out.append(("##", title, [f"budget: {unit} ≤", "best: point (model)", "k", "accuracy % [95% CI]",
                                      f"best other {task['other']}: point (k)", "its accuracy %"], rows))
        metrics = ["coverage"] + [m for m in task["metrics"] if m != "coverage"]
        rows = [[r["point"], r["model"], r["state"], f"{r['samples_per_problem']:.3g}",
                 _num(r["tokens_per_problem"]), _num(r["gpu_s"]),
                 *[pct(r["metrics"].get(m, {}).get("accuracy"), r["metrics"].get(m, {}).get("ci95")) for m in metrics]]
                for r in task["points"]]
        out.append(("##", f"{task['task']}: points at all their samples",
                    ["point", "model", "state", "samples/problem", "gen. tokens/problem", "GPU-s",
                     *[f"{_metric_name(m)} %" for m in metrics]], rows))
    if report["engines"]:
        out.append(("##", "Engines", ["engine", "starts", "points served", "start s", "start GPU-s",
                                      "start GPU-s per point"],
                    [[label, str(info.get("starts", 0)), str(len(info.get("points", []))), _num(info.get("start_s")),
                      _num(info.get("start_gpu_s")),
                      _num(info["start_gpu_s"] / info["shared_by"] if info.get("shared_by") else None)]
                     for label, info in report["engines"].items()]))
    return out


def _label(config: dict[str, Any], with_model: bool = True) -> str:
    """``point (model)``: the model only where a task has several and the point's name does not say it."""
    name = config["point"]
    if with_model and config["model"] not in name and config["model"].replace(" ", "-") not in name:
        name = f"{name} ({config['model']})"
    return name if len(name) <= 60 else name[:57] + "..."


def _best(config: dict[str, Any] | None, with_model: bool) -> list[str]:
    return [_label(config, with_model), str(config["k"]), pct(config["accuracy"], config["ci95"])] if config \
        else ["–", "", ""]


def _other(config: dict[str, Any] | None, with_model: bool) -> list[str]:
    return [f"{_label(config, with_model)} (k={config['k']})", pct(config["accuracy"], config["ci95"])] if config \
        else ["–", ""]


def _metric_name(metric: str) -> str:
    return "coverage (pass@k)" if metric == "coverage" else metric


def _num(value: float | None) -> str:
    """3 significant digits; powers of ten as ``3.2e10`` above 10^5."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if abs(value) >= 1e5:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:.3g}"


def _intro(report: dict[str, Any]) -> list[str]:
    points = sum(len(t["points"]) for t in report["tasks"])
    lines = [f"{points} point(s) with results over {len(report['tasks'])} task(s); compute axis: "
             f"**{report['budget_name']}** (available: {', '.join(report['budgets_available']) or 'samples'})."]
    if report["budget"] == "flops":
        sizes = ", ".join(f"{m} {_num(p)}" for m, p in report["params"].items() if p is not None)
        lines.append(f"FLOPs proxy = 2 × parameters × (prompt tokens + k × completion tokens) per problem "
                     f"(Large Language Monkeys' forward-pass count, prompt prefilled once); parameters: {sizes}"
                     + (" (from the sweep's `model_params`" + ", the rest from the model names)"
                        if report["params_given"] else " (from the model names)") + ".")
    if report["budget"] == "gpu_s":
        lines.append("GPU-seconds per point: its own generation GPU-seconds plus an equal share of its engines' "
                     "start GPU-seconds (every start of an engine, shared by the points it served; Engines table), "
                     "so identical points cost the same whichever ran first.")
    lines.append("Brackets: 95% percentile bootstrap interval over problems (coverage at every k, resampled once "
                 "for all points of a task; majority@k at every k and each selector at all samples from the "
                 "point's metrics.json; a selector's accuracy below all samples is the mean of refits on "
                 "random k-subsets, without an interval). The frontier table gives, for each budget, the best "
                 "configuration costing at most that, and the best one of another model (of another point where a "
                 "task has one model).")
    if report["missing"]:
        lines.append("Not in the report (no results yet): " + ", ".join(f"{m['name']} ({m['state']})"
                                                                        for m in report["missing"]) + ".")
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Sweep {report['name']}", "", *[line + "\n" for line in _intro(report)]]
    if report.get("plot"):
        lines += [f"![accuracy against compute]({report['plot']})", ""]
    for level, title, header, rows in _tables(report):
        lines += [f"{level} {title}", "", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def render_html(report: dict[str, Any], plot: Path | None) -> str:
    parts = [f"<h1>Sweep {html.escape(report['name'])}</h1>"]
    parts += [f"<p>{html.escape(line).replace('**', '')}</p>" for line in _intro(report)]
    if plot is not None and plot.is_file():
        parts.append(f'<img alt="accuracy against compute" src="data:image/png;base64,'
                     f'{base64.b64encode(plot.read_bytes()).decode()}">')
    for _, title, header, rows in _tables(report):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts.append(f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{body}</table>")
    return ("<!doctype html><html><head><meta charset=utf-8><title>Sweep " + html.escape(report["name"])
            + "</title><style>body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}"
            "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px}"
            "td:nth-child(n+2){text-align:right}img{max-width:100%}</style></head><body>"
            + "".join(parts) + "</body></html>")


def print_summary(report: dict[str, Any], console: Console) -> None:
    """Per task, the best configuration per budget for coverage and the first selector (a table that reads at
    80 columns, ``report.terminal.table``); then where the page is, one path a line."""
    for task in report["tasks"]:
        several = len(task["models"]) > 1
        columns = [f"{report['budget']} ≤"]
        for metric in task["metrics"][:2]:
            columns += [f"{metric}: best (k)", f"{metric} %"]
        rows = []
        for cells in zip(*[task["frontier"][m]["table"] for m in task["metrics"][:2]]):
            line = [_num(cells[0]["budget"])]
            for row in cells:
                best = row["best"]
                line += [escape(f"{_label(best, several)} (k={best['k']})"), pct(best["accuracy"])] if best else ["–", ""]
            rows.append(line)
        console.print(f"{task['task']}: best configuration per budget ({report['budget_name']})", style="bold",
                      markup=False, highlight=False, soft_wrap=True)
        console.print(table(columns, rows, right=[c for c in columns if c.endswith("%")]))
    directory = Path(report["directory"])
    for label, name in (("report", "report.md"), ("page", "report.html"), ("plot", "report.png")):
        console.print(f"{label + ':':8}{directory / name}", highlight=False, markup=False, soft_wrap=True)


def _yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) if path.is_file() else {}
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


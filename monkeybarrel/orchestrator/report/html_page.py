"""``report.html``: the report as one self-contained page with per-problem drill-down.

No external files or network: the coverage plot is inlined (base64 PNG), the data is a JSON block,
and a small script renders the per-problem table (filter: all / correct / incorrect / disagreement,
by a chosen selector; search by id; deep links ``#filter=incorrect&method=majority&problem=ID``) and, on click, the problem's candidates with answer, label,
verifier scores, which selectors picked it, and the text. Text is inserted with ``textContent``
(never as HTML), so candidate output cannot inject markup. For very large experiments the
drill-down holds the first problems up to ``max_problems`` problems and ``max_candidates``
candidates, and texts are cut at ``max_text`` characters
(the page says so); the metric tables always cover everything.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from .drilldown import Drilldown
from ..stages.evaluate import to_json
from ..experiment import Experiment
from .markdown import percent


def _pct(value: float | None, interval: list | None = None) -> str:
    if value is None:
        return "–"
    return percent(value) + (f" <span class=ci>[{percent(interval[0])}, {percent(interval[1])}]</span>" if interval else "")


def _metric_tables(metrics: dict[str, Any]) -> str:
    parts = []
    labelled = metrics.get("labelled_candidates", metrics.get("n_candidates", 0))
    if labelled == 0:
        parts.append("<p class=warn><b>No labels stored</b>: accuracies cannot be computed (shown as –, not 0 %).</p>")
    rows = "".join(f"<tr><td>{html.escape(name)}</td><td>{_pct(info.get('accuracy'), info.get('ci95'))}</td>"
                   f"<td>{'yes' if info.get('uses_labels') else 'no'}</td><td>{info.get('abstained', 0)}</td></tr>"
                   for name, info in metrics.get("selection", {}).items())
    parts.append("<h2>Selection</h2><table class=metrics><tr><th>method</th><th>accuracy % [95% CI]</th>"
                 f"<th>uses labels</th><th>abstained</th></tr>{rows}</table>")
    cov_ci, maj_ci = metrics.get("coverage_ci95", {}), metrics.get("majority_ci95", {})
    rows = "".join(f"<tr><td>{k}</td><td>{_pct(metrics['coverage'].get(str(k)), cov_ci.get(str(k)))}</td>"
                   f"<td>{_pct(metrics['majority'].get(str(k)), maj_ci.get(str(k)))}</td></tr>" for k in metrics.get("ks", []))
    parts.append("<h2>Coverage and majority vote against k</h2><table class=metrics><tr><th>k</th>"
                 f"<th>coverage pass@k %</th><th>majority@k %</th></tr>{rows}</table>")
    parts.append("<p class=note>Brackets: 95% percentile bootstrap interval over problems. random (pass@1) is the "
                 "exact expected accuracy of a uniformly random pick.</p>")
    return "".join(parts)


def render_html(experiment: Experiment, metrics: dict[str, Any] | None = None, max_problems: int = 1000,
                max_candidates: int = 20_000, max_text: int = 2000) -> str:
    """The page as a string (see the module docstring)."""
    metrics = experiment.metrics() if metrics is None else metrics
    view = Drilldown.load(experiment)
    ids = view.problem_ids()
    problems, budget = [], max_candidates
    for pid in ids[:max_problems]:
        if view.rows_of[pid].size > budget:
            break
        budget -= view.rows_of[pid].size
        summary = view.summary(pid)
        summary["candidates"] = view.candidate_rows(pid, max_text=max_text)
        problems.append(summary)
    data = {"methods": list(view.picks), "uses_labels": view.uses_labels, "verifiers": list(view.verifiers),
            "problems": problems, "total_problems": len(ids), "max_text": max_text}
    blob = to_json(data, compact=True).replace("</", "<\\/")
    plot = experiment.directory / "coverage.png"
    image = (f'<img alt="coverage and accuracy against k" src="data:image/png;base64,'
             f'{base64.b64encode(plot.read_bytes()).decode()}">' if plot.is_file() else "")
    title = html.escape(experiment.config.name)
    capped = (f"<p class=warn>Drill-down shows the first {len(problems)} of {len(ids)} problems (at most "
              f"{max_problems} problems and {max_candidates:,} candidates per page); "
              "<code>monkeybarrel show DIR --problem ID</code> shows any.</p>" if len(problems) < len(ids) else "")
    return _PAGE.format(title=title, n_problems=metrics.get("n_problems", len(ids)),
                        n_candidates=metrics.get("n_candidates", 0), tables=_metric_tables(metrics), image=image,
                        capped=capped, data=blob, script=_SCRIPT, style=_STYLE)


def write_html(experiment: Experiment, metrics: dict[str, Any] | None = None) -> Path:
    """Write ``DIR/report.html``; returns its path."""
    return experiment.store.write_text("report.html", render_html(experiment, metrics))


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
table.metrics td:nth-child(n+2){text-align:right}.ci{color:#777;font-size:90%}.warn{background:#fff3cd;padding:.4em}
.note{color:#555}.ok{color:#18794e;font-weight:bold}.bad{color:#c0392b;font-weight:bold}
#problems tr.problem{cursor:pointer}#problems tr.problem:hover{background:#f3f6fa}
pre{white-space:pre-wrap;max-width:60em;margin:0;font-size:12px}.picked{background:#eef6ff}
.controls{margin:.6em 0}.controls button.on{background:#246;color:#fff}img{max-width:640px}
"""

_SCRIPT = r"""
const data = JSON.parse(document.getElementById('data').textContent);
let filter = 'all', method = data.methods.find(m => !data.uses_labels[m] && !m.startsWith('random')) || data.methods[0];
const sel = document.getElementById('method');
for (const m of data.methods) { const o = document.createElement('option'); o.value = o.textContent = m; sel.appendChild(o); }
if (method) sel.value = method;
sel.onchange = () => { method = sel.value; render(); };
document.querySelectorAll('.controls button').forEach(b => b.onclick = () => {
  filter = b.dataset.filter; document.querySelectorAll('.controls button').forEach(x => x.classList.toggle('on', x === b)); render(); });
document.getElementById('search').oninput = render;
function cell(tr, text, cls) { const td = document.createElement('td'); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function mark(c) { return c === null || c === undefined ? '–' : (c ? '✓' : '✗'); }
function keep(p) {
  const pick = p.picks[method] || {}; const q = document.getElementById('search').value.trim();
  if (q && !p.problem_id.includes(q)) return false;
  if (filter === 'correct') return pick.correct === true;
  if (filter === 'incorrect') return pick.correct === false || pick.row === -1;
  if (filter === 'disagreement') return p.disagreement;
  return true;
}
function render() {
  const body = document.getElementById('rows'); body.replaceChildren();
  let shown = 0;
  for (const p of data.problems) {
    if (!keep(p)) continue; shown++;
    const pick = p.picks[method] || {};
    const tr = document.createElement('tr'); tr.className = 'problem'; tr.dataset.id = p.problem_id;
    cell(tr, p.problem_id); cell(tr, p.n); cell(tr, p.n_correct === null ? '–' : p.n_correct); cell(tr, p.reference ?? '–');
    cell(tr, pick.answer ?? '–'); cell(tr, mark(pick.correct), pick.correct ? 'ok' : (pick.correct === false ? 'bad' : ''));
    cell(tr, p.disagreement ? 'yes' : '');
    tr.onclick = () => toggle(tr, p); body.appendChild(tr);
  }
  document.getElementById('count').textContent = `${shown} of ${data.problems.length} problems shown`;
}
function toggle(tr, p) {
  const next = tr.nextSibling;
  if (next && next.classList && next.classList.contains('detail')) { next.remove(); return; }
  const d = document.createElement('tr'); d.className = 'detail'; const td = document.createElement('td'); td.colSpan = 7;
  const prompt = document.createElement('pre'); prompt.textContent = p.prompt; td.appendChild(prompt);
  const t = document.createElement('table'); const head = document.createElement('tr');
  for (const h of ['generator', '#', 'answer', 'correct', ...data.verifiers, 'finish', 'picked by', 'text']) {
    const th = document.createElement('th'); th.textContent = h; head.appendChild(th); }
  t.appendChild(head);
  for (const c of p.candidates) {
    const r = document.createElement('tr'); if (c.picked_by.includes(method)) r.className = 'picked';
    cell(r, c.generator_id); cell(r, c.sample_index); cell(r, c.answer ?? '–');
    cell(r, mark(c.correct), c.correct ? 'ok' : (c.correct === false ? 'bad' : ''));
    for (const v of data.verifiers) cell(r, c.scores[v] === null ? '–' : c.scores[v].toPrecision(3));
    cell(r, c.finish_reason ?? ''); cell(r, c.picked_by.join(', '));
    const text = document.createElement('pre'); text.textContent = c.text ?? c.error ?? ''; r.appendChild(document.createElement('td')).appendChild(text);
    t.appendChild(r);
  }
  td.appendChild(t); d.appendChild(td); tr.after(d);
}
// Deep links: report.html#filter=incorrect&method=majority&problem=ID opens that view.
const hash = new URLSearchParams(location.hash.slice(1));
if (hash.get('method') && data.methods.includes(hash.get('method'))) { method = sel.value = hash.get('method'); }
if (hash.get('filter')) { const b = document.querySelector(`.controls button[data-filter="${hash.get('filter')}"]`); if (b) b.click(); }
render();
if (hash.get('problem')) {
  const tr = [...document.querySelectorAll('#rows tr.problem')].find(r => r.dataset.id === hash.get('problem'));
  if (tr) { tr.click(); tr.scrollIntoView(); }
}
"""

_PAGE = """<!doctype html>
<html lang=en><head><meta charset=utf-8><title>{title} — monkeybarrel report</title><style>{style}</style></head>
<body>
<h1>{title}</h1>
<p>{n_problems} problems, {n_candidates} candidates.</p>
{tables}
{image}
<h2>Problems</h2>
{capped}
<div class=controls>selector <select id=method></select>
 <button data-filter=all class=on>all</button><button data-filter=correct>correct</button>
 <button data-filter=incorrect>incorrect</button><button data-filter=disagreement>disagreement</button>
 <input id=search placeholder="problem id"> <span id=count></span></div>
<table id=problems><thead><tr><th>problem</th><th>samples</th><th>correct samples</th><th>reference</th>
<th>picked answer</th><th>right</th><th>selectors disagree</th></tr></thead><tbody id=rows></tbody></table>
<p class=note>Click a problem for its candidates. "disagreement": the label-free selectors picked different answers.</p>
<script type="application/json" id=data>{data}</script>
<script>{script}</script>
</body></html>
"""

"""``report.html``: the whole report as one self-contained page, plus a per-problem drill-down.

The page is ``report.md`` rendered (markdown-it, the CommonMark parser rich uses), so every section
and number of the markdown report is on the page: summary, coverage and majority against k, the
coverage scaling law, selection accuracy against k, the coverage plot, selection, verifiers, per
generator, cost, allocation at equal compute and its plot. Plots are inlined (base64 PNG), so the
page needs no other file and no network; a contents line links each section.

Below it, a script renders the per-problem table from a JSON block: filter all / correct / incorrect /
disagreement by a chosen selector, search by id, and on click the problem's candidates with answer,
label, verifier scores, which selectors picked it, and the text. The URL follows the view
(``#filter=incorrect&method=majority&q=…&problem=ID``, updated on every click and change), so a
copied link opens the same view; a linked problem the filter hides is announced, with a button that
shows it. Text is inserted with ``textContent`` (never as HTML) and markdown's raw HTML is off, so
candidate output cannot inject markup. For very large experiments the drill-down holds the first
problems up to ``max_problems`` problems and ``max_candidates`` candidates, and texts are cut at
``max_text`` characters (the page says so); the report above always covers everything.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any

from ..experiment import Experiment
from ..stages.evaluate import to_json
from .drilldown import Drilldown


def render_report_body(markdown_text: str, directory: Path) -> tuple[str, list[tuple[str, str]]]:
    """``report.md`` as HTML (tables, headings with ids, images inlined from ``directory``) and its
    ``[(id, heading)]`` sections."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(markdown_text)
    sections = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h2":
            title = tokens[i + 1].content
            anchor = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
            token.attrSet("id", anchor)
            sections.append((anchor, title))
        for child in token.children or ():
            source = child.attrGet("src") if child.type == "image" else None
            if source and "/" not in source and (directory / source).is_file():
                child.attrSet("src", "data:image/png;base64," + base64.b64encode((directory / source).read_bytes()).decode())
    return parser.renderer.render(tokens, parser.options, {}), sections


def render_html(experiment: Experiment, metrics: dict[str, Any] | None = None, markdown_text: str | None = None,
                max_problems: int = 1000, max_candidates: int = 20_000, max_text: int = 2000) -> str:
    """The page as a string (see the module docstring); ``markdown_text`` defaults to the stored ``report.md``."""
    metrics = experiment.metrics() if metrics is None else metrics
    if markdown_text is None:
        report = experiment.directory / "report.md"
        markdown_text = report.read_text() if report.is_file() else f"# {experiment.config.name}\n"
    body, sections = render_report_body(markdown_text, experiment.directory)
    view = Drilldown.load(experiment)
    ids = view.problem_ids()
    expected = {m for m, info in metrics.get("selection", {}).items() if info.get("type") == "random"}
    problems, budget = [], max_candidates
    for pid in ids[:max_problems]:
        if view.rows_of[pid].size > budget:
            break
        budget -= view.rows_of[pid].size
        summary = view.summary(pid)
        summary["picks"] = {m: pick for m, pick in summary["picks"].items() if m not in expected}
        summary["candidates"] = view.candidate_rows(pid, max_text=max_text)
        problems.append(summary)
    methods = [m for m in view.picks if m not in expected]
    data = {"methods": methods, "uses_labels": view.uses_labels, "verifiers": list(view.verifiers),
            "problems": problems, "total_problems": len(ids), "max_text": max_text,
            "accuracy": {m: metrics.get("selection", {}).get(m, {}).get("accuracy") for m in methods}}
    blob = to_json(data, compact=True).replace("</", "<\\/")
    capped = (f"<p class=warn>The drill-down holds the first {len(problems)} of {len(ids)} problems (at most "
              f"{max_problems} problems and {max_candidates:,} candidates per page); "
              "<code>monkeybarrel show DIR --problem ID</code> shows any.</p>" if len(problems) < len(ids) else "")
    contents = " · ".join(f'<a href="#{anchor}">{html.escape(title)}</a>' for anchor, title in sections)
    return _PAGE.format(title=html.escape(experiment.config.name), contents=contents, body=body, capped=capped,
                        data=blob, script=_SCRIPT, style=_STYLE)


def write_html(experiment: Experiment, metrics: dict[str, Any] | None = None, markdown_text: str | None = None) -> Path:
    """Write ``DIR/report.html``; returns its path."""
    return experiment.store.write_text("report.html", render_html(experiment, metrics, markdown_text))


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:75em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
.warn{background:#fff3cd;padding:.4em}.note,nav{color:#555}nav{margin:.3em 0 1em}
.ok{color:#18794e;font-weight:bold}.bad{color:#c0392b;font-weight:bold}
#problems tr.problem{cursor:pointer}#problems tr.problem:hover{background:#f3f6fa}#problems tr[data-open]{background:#eef3fa}
pre{white-space:pre-wrap;max-width:60em;margin:0;font-size:12px}.picked{background:#eef6ff}
.controls{margin:.6em 0}.controls button.on{background:#246;color:#fff}img{max-width:100%}
#notice:empty{display:none}#notice{background:#fff3cd;padding:.4em;margin:.4em 0}
"""

_SCRIPT = r"""
const data = JSON.parse(document.getElementById('data').textContent);
const state = {filter: 'all', method: data.methods.find(m => !data.uses_labels[m]) || data.methods[0] || '', q: '', problem: ''};
const sel = document.getElementById('method'), search = document.getElementById('search');
const notice = document.getElementById('notice');
for (const m of data.methods) { const o = document.createElement('option'); o.value = o.textContent = m; sel.appendChild(o); }
function cell(tr, text, cls) { const td = document.createElement('td'); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function mark(c) { return c === null || c === undefined ? '–' : (c ? '✓' : '✗'); }
function percent(x) { return x === null || x === undefined ? '–' : (100 * x).toFixed(1); }
function keep(p) {
  const pick = p.picks[state.method] || {};
  if (state.q && !p.problem_id.includes(state.q)) return false;
  if (state.filter === 'correct') return pick.correct === true;
  if (state.filter === 'incorrect') return pick.correct === false || pick.row === -1;
  if (state.filter === 'disagreement') return p.disagreement;
  return true;
}
// The URL follows the view: every change rewrites the hash (no history entry per click).
function writeHash() {
  const h = new URLSearchParams();
  if (state.filter !== 'all') h.set('filter', state.filter);
  if (state.method) h.set('method', state.method);
  if (state.q) h.set('q', state.q);
  if (state.problem) h.set('problem', state.problem);
  const text = '#' + h.toString();
  if (location.hash !== text) history.replaceState(null, '', text);
}
function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  state.filter = ['all', 'correct', 'incorrect', 'disagreement'].includes(h.get('filter')) ? h.get('filter') : 'all';
  if (h.get('method') && data.methods.includes(h.get('method'))) state.method = h.get('method');
  state.q = h.get('q') || ''; state.problem = h.get('problem') || '';
}
function render() {
  sel.value = state.method; search.value = state.q;
  document.querySelectorAll('.controls button').forEach(b => b.classList.toggle('on', b.dataset.filter === state.filter));
  const body = document.getElementById('rows'); body.replaceChildren();
  let shown = 0, right = 0, judged = 0;
  for (const p of data.problems) {
    const pick = p.picks[state.method] || {};
    if (pick.correct !== null && pick.correct !== undefined) { judged++; if (pick.correct) right++; }
    if (!keep(p)) continue; shown++;
    const tr = document.createElement('tr'); tr.className = 'problem'; tr.dataset.id = p.problem_id;
    cell(tr, p.problem_id); cell(tr, p.n); cell(tr, p.n_correct === null ? '–' : p.n_correct); cell(tr, p.reference ?? '–');
    cell(tr, pick.answer ?? '–'); cell(tr, mark(pick.correct), pick.correct ? 'ok' : (pick.correct === false ? 'bad' : ''));
    cell(tr, p.disagreement ? 'yes' : '');
    tr.onclick = () => { state.problem = state.problem === p.problem_id ? '' : p.problem_id; render(); };
    body.appendChild(tr);
    if (p.problem_id === state.problem) { tr.dataset.open = ''; tr.after(detail(p)); }
  }
  const whole = data.problems.length === data.total_problems;
  document.getElementById('count').textContent = `${shown} of ${data.problems.length} problems shown` +
    (judged ? `; ${state.method}: ${right} of ${judged} right` + (whole ? ` (${percent(data.accuracy[state.method])} %, as in the Selection table)` : ' in this page') : '');
  announce();
  writeHash();
}
function announce() {
  notice.replaceChildren();
  if (!state.problem || document.querySelector('#rows tr[data-open]')) return;
  const p = data.problems.find(x => x.problem_id === state.problem);
  const say = text => notice.appendChild(document.createTextNode(text));
  if (!p) {
    say(data.problems.length < data.total_problems
      ? `Problem “${state.problem}” is not in this page (it holds the first ${data.problems.length} of ${data.total_problems} problems): monkeybarrel show DIR --problem ${state.problem}`
      : `No problem “${state.problem}” in this experiment.`);
    return;
  }
  const why = state.q && !p.problem_id.includes(state.q) ? `the search “${state.q}”` : `the filter “${state.filter}” for ${state.method}`;
  say(`Problem “${state.problem}” is hidden by ${why}. `);
  const b = document.createElement('button'); b.textContent = 'show it';
  b.onclick = () => { state.filter = 'all'; state.q = ''; render(); document.querySelector('#rows tr[data-open]')?.scrollIntoView(); };
  notice.appendChild(b);
}
function detail(p) {
  const d = document.createElement('tr'); d.className = 'detail'; const td = document.createElement('td'); td.colSpan = 7;
  const prompt = document.createElement('pre'); prompt.textContent = p.prompt; td.appendChild(prompt);
  const t = document.createElement('table'); const head = document.createElement('tr');
  for (const h of ['generator', '#', 'answer', 'correct', ...data.verifiers, 'finish', 'picked by', 'text']) {
    const th = document.createElement('th'); th.textContent = h; head.appendChild(th); }
  t.appendChild(head);
  for (const c of p.candidates) {
    const r = document.createElement('tr'); r.className = 'candidate'; if (c.picked_by.includes(state.method)) r.classList.add('picked');
    cell(r, c.generator_id); cell(r, c.sample_index); cell(r, c.answer ?? '–');
    cell(r, mark(c.correct), c.correct ? 'ok' : (c.correct === false ? 'bad' : ''));
    for (const v of data.verifiers) cell(r, c.scores[v] === null ? '–' : c.scores[v].toPrecision(3));
    cell(r, c.finish_reason ?? ''); cell(r, c.picked_by.join(', '));
    const text = document.createElement('pre'); text.textContent = c.text ?? c.error ?? ''; r.appendChild(document.createElement('td')).appendChild(text);
    t.appendChild(r);
  }
  td.appendChild(t); d.appendChild(td); return d;
}
sel.onchange = () => { state.method = sel.value; render(); };
search.oninput = () => { state.q = search.value.trim(); render(); };
document.querySelectorAll('.controls button').forEach(b => b.onclick = () => { state.filter = b.dataset.filter; render(); });
window.addEventListener('hashchange', () => { readHash(); render(); });
readHash(); render();
document.querySelector('#rows tr[data-open]')?.scrollIntoView();
"""

_PAGE = """<!doctype html>
<html lang=en><head><meta charset=utf-8><title>{title} — monkeybarrel report</title><style>{style}</style></head>
<body>
<nav>Contents: {contents} · <a href="#drilldown">Problems</a></nav>
{body}
<h2 id=drilldown>Problems</h2>
{capped}
<div class=controls>selector <select id=method></select>
 <button data-filter=all class=on>all</button><button data-filter=correct>correct</button>
 <button data-filter=incorrect>incorrect</button><button data-filter=disagreement>disagreement</button>
 <input id=search placeholder="problem id"> <span id=count></span></div>
<div id=notice role=status></div>
<table id=problems><thead><tr><th>problem</th><th>samples</th><th>correct samples</th><th>reference</th>
<th>picked answer</th><th>right</th><th>selectors disagree</th></tr></thead><tbody id=rows></tbody></table>
<p class=note>Click a problem for its candidates; the address bar keeps the view (copy it to share). "correct
samples" / "samples" is the problem's expected accuracy of a random pick (random (pass@1) above is its mean).
"disagreement": the label-free selectors picked different answers.</p>
<script type="application/json" id=data>{data}</script>
<script>{script}</script>
</body></html>
"""

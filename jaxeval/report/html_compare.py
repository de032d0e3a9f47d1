"""The comparison part of the report: paired tests, then the flipped documents, for runs A and B.

A = baseline run, B = the other    tests: one row per task, metric and filter (p < 0.05 shaded)
                                   flips: per task, each document whose binary metric changed,
                                   with its prompt, the choices (gold, each run's pick and
                                   loglikelihoods) or the target and both generations
"""

from __future__ import annotations

from html import escape

from jaxeval.report.compare import Comparison, Flip
from jaxeval.report.svg import fmt

PROMPT_TAIL = 1200  # characters of a long prompt shown before "show all"


def scroll(table: str) -> str:
    """A wide table scrolls in its own box instead of widening the page."""
    return f"<div class='scroll'>{table}</div>"


def _p(p: float) -> str:
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def tests_table(c: Comparison, scope: str) -> str:
    head = (
        "<tr><th>Task</th><th>Metric</th><th>Filter</th><th>n</th><th>A</th><th>B</th>"
        "<th>B − A</th><th>test</th><th>only A right</th><th>only B right</th><th>p</th></tr>"
    )
    rows = []
    for m in sorted(c.metrics, key=lambda m: (m.task, m.metric, m.filter)):
        cls = ' class="sig"' if m.p_value < 0.05 else ""
        counts = (m.a_only, m.b_only) if m.a_only is not None else ("", "")
        rows.append(
            f"<tr{cls}><td>{escape(m.task)}</td><td>{escape(m.metric)}</td>"
            f"<td>{escape(m.filter)}</td><td class='num'>{m.n}</td>"
            f"<td class='num'>{fmt(m.a_mean)}</td><td class='num'>{fmt(m.b_mean)}</td>"
            f"<td class='num'>{m.b_mean - m.a_mean:+.4f}</td><td>{m.test}</td>"
            f"<td class='num'>{counts[0]}</td><td class='num'>{counts[1]}</td>"
            f"<td class='num'>{_p(m.p_value)}</td></tr>"
        )
    if not rows:
        return "<p class='muted'>No per-document values to test (no shared samples).</p>"
    return (
        f"<label><input type='checkbox' class='sig-only' data-scope='{scope}'> only p &lt; 0.05"
        "</label>"
        + scroll(f"<table id='{scope}'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")
    )


def _prompt(text: str) -> str:
    if len(text) <= PROMPT_TAIL:
        return f"<pre>{escape(text)}</pre>"
    return (
        f"<pre>…{escape(text[-PROMPT_TAIL:])}</pre><details><summary>whole prompt "
        f"({len(text)} characters)</summary><pre>{escape(text)}</pre></details>"
    )


def _score_cells(
    i: int, scores: tuple[float, ...], pick: int | None, run: str, marked: bool
) -> str:
    value = scores[i] if i < len(scores) else None
    picked = marked and i == pick
    cls = f" pick-{run.lower()}" if picked else ""
    mark = f" ◀ {run}" if picked else ""
    return f"<td class='num{cls}'>{'' if value is None else f'{value:.3f}'}{mark}</td>"


def _choices(flip: Flip) -> str:
    """The choices with each run's scores; the picks marked in the columns of the metric that
    changed: loglikelihood for acc, loglikelihood per character for acc_norm."""
    changed = {name for name, _, _ in flip.changed}
    norm = "acc_norm" in changed and bool(flip.a.norm_scores) and bool(flip.b.norm_scores)
    raw_marked = "acc" in changed or not norm
    head = "<th>#</th><th>choice</th><th>A loglik</th><th>B loglik</th>"
    if norm:
        head += "<th>A loglik / char</th><th>B loglik / char</th>"
    rows = []
    for i, choice in enumerate(flip.choices):
        gold = " <span class='gold'>✓ gold</span>" if i == flip.gold else ""
        cells = _score_cells(i, flip.a.scores, flip.a.pick, "A", raw_marked)
        cells += _score_cells(i, flip.b.scores, flip.b.pick, "B", raw_marked)
        if norm:
            cells += _score_cells(i, flip.a.norm_scores, flip.a.pick_norm, "A", True)
            cells += _score_cells(i, flip.b.norm_scores, flip.b.pick_norm, "B", True)
        rows.append(f"<tr><td class='num'>{i}</td><td>{escape(choice)}{gold}</td>{cells}</tr>")
    note = ""
    if norm:
        note = (
            "<p class='muted'>acc picks the highest loglikelihood; acc_norm the highest "
            "loglikelihood per character of the choice.</p>"
        )
    return scroll(f"<table class='choices'><tr>{head}</tr>{''.join(rows)}</table>") + note


def _generated(flip: Flip) -> str:
    parts = [f"<div><b>target</b><pre>{escape(flip.target)}</pre></div>"]
    for name, answer in (("A", flip.a), ("B", flip.b)):
        raw = ""
        if answer.raw is not None and answer.raw != answer.text:
            raw = f"<details><summary>raw</summary><pre>{escape(answer.raw)}</pre></details>"
        parts.append(f"<div><b>{name}</b><pre>{escape(answer.text)}</pre>{raw}</div>")
    return "".join(parts)


def flip_html(flip: Flip) -> str:
    changes = []
    for metric, a, b in flip.changed:
        cls = "gain" if b > a else "loss"
        changes.append(f"<span class='{cls}'>{escape(metric)} {fmt(a)} → {fmt(b)}</span>")
    body = _choices(flip) if flip.choices else _generated(flip)
    return (
        f"<div class='flip' data-doc='{flip.doc_id}'><div class='flip-head'>document "
        f"{flip.doc_id} <span class='muted'>filter {escape(flip.filter)}</span> · "
        f"{' · '.join(changes)}</div>{_prompt(flip.prompt)}{body}</div>"
    )


def flips_html(c: Comparison, scope: str, max_flips: int) -> str:
    if not any(c.flips.values()):
        return "<p class='muted'>No document changed its score.</p>"
    out = [
        f"<input type='search' class='flip-filter' data-scope='{scope}' "
        "placeholder='filter documents by any word'> "
        f"<span class='muted' id='{scope}-count'></span><div id='{scope}'>"
    ]
    first = True
    for task, flips in c.flips.items():
        if not flips:
            continue
        gained = sum(1 for f in flips if any(b > a for _, a, b in f.changed))
        lost = len(flips) - gained
        shown = flips[:max_flips]
        more = (
            f"<p class='muted'>{len(flips) - len(shown)} more not shown (--max_flips).</p>"
            if len(flips) > len(shown)
            else ""
        )
        opened = " open" if first else ""
        first = False
        out.append(
            f"<details class='task'{opened} data-task='{escape(task)}'><summary>{escape(task)}: "
            f"{len(flips)} document(s) changed · <span class='gain'>{gained} better in B</span> · "
            f"<span class='loss'>{lost} worse in B</span></summary>"
            f"{''.join(flip_html(f) for f in shown)}{more}</details>"
        )
    out.append("</div>")
    return "".join(out)


def comparison_html(c: Comparison, index: int, max_flips: int) -> str:
    notes = "".join(f"<p class='note'>{escape(n)}</p>" for n in c.notes)
    return (
        f"<section class='comparison' id='comparison-{index}'>"
        f"<h2>A = {escape(c.a.label)} · B = {escape(c.b.label)}</h2>"
        "<p class='muted'>Documents both runs scored, paired by doc_id. Binary metrics: McNemar's "
        "exact test on the documents only one run got right; other per-document metrics: a paired "
        "t-test. Shaded: p &lt; 0.05 (not corrected for the number of tests).</p>"
        f"{tests_table(c, f'tests-{index}')}{notes}"
        f"<h3>Documents that changed</h3>{flips_html(c, f'flips-{index}', max_flips)}</section>"
    )

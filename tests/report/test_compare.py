"""Document-level comparison: against counts taken straight from the samples files."""

from __future__ import annotations

import json
import re

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.report.compare import answer_of, compare_runs, shared_tasks
from jaxeval.report.html import render_report
from jaxeval.report.html_compare import flip_html
from jaxeval.report.load import load_runs
from tests.report.synthetic import write_n_shot_pair


def _per_doc(folder, task, metric, flt="none"):
    (file,) = folder.rglob(f"samples_{task}_*.jsonl")
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    return {r["doc_id"]: r[metric] for r in rows if r["filter"] == flt}


def test_same_answers_from_lm_eval_and_jaxeval_change_nothing(lm_eval_dir, jaxeval_dir):
    a, b = load_runs([str(lm_eval_dir), str(jaxeval_dir)])
    c = compare_runs(a, b)
    assert c.notes == () and all(not flips for flips in c.flips.values())
    assert len(c.metrics) == 4  # arc_easy acc, acc_norm; gsm8k exact_match x 2 filters
    for m in c.metrics:
        assert (m.n, m.p_value, m.a_only, m.b_only) == (20, 1.0, 0, 0)
        key = f"{m.metric},{m.filter}"
        assert m.a_mean == pytest.approx(a.results["results"][m.task][key])


@pytest.mark.parametrize(
    "task, metric, flt",
    [("arc_easy", "acc", "none"), ("arc_easy", "acc_norm", "none"),
     ("gsm8k", "exact_match", "strict-match"), ("gsm8k", "exact_match", "flexible-extract")],
)  # fmt: skip
def test_flips_and_mcnemar_counts(lm_eval_dir, jaxeval_b_dir, task, metric, flt):
    a, b = load_runs([str(lm_eval_dir), str(jaxeval_b_dir)])
    c = compare_runs(a, b)
    xa, xb = _per_doc(lm_eval_dir, task, metric, flt), _per_doc(jaxeval_b_dir, task, metric, flt)
    only_a = sorted(d for d in xa if xa[d] > xb[d])
    only_b = sorted(d for d in xa if xb[d] > xa[d])
    (m,) = [m for m in c.metrics if (m.task, m.metric, m.filter) == (task, metric, flt)]
    assert (m.a_only, m.b_only, m.test) == (len(only_a), len(only_b), "McNemar exact")
    assert m.b_mean == pytest.approx(b.results["results"][task][f"{metric},{flt}"])
    flipped = sorted(
        f.doc_id
        for f in c.flips[task]
        if f.filter == flt and any(name == metric for name, _, _ in f.changed)
    )
    assert flipped == sorted(only_a + only_b) and flipped  # the fake models disagree somewhere


def test_a_flip_shows_the_choices_gold_and_picks(lm_eval_dir, jaxeval_b_dir):
    a, b = load_runs([str(lm_eval_dir), str(jaxeval_b_dir)])
    flip = compare_runs(a, b).flips["arc_easy"][0]
    assert len(flip.choices) >= 3 and flip.prompt.startswith("Question:")
    assert flip.gold is not None
    if "acc" in [name for name, _, _ in flip.changed]:  # acc follows the loglikelihood's pick
        assert flip.a.pick != flip.b.pick and flip.gold in (flip.a.pick, flip.b.pick)
    assert flip.a.pick == max(range(len(flip.a.scores)), key=flip.a.scores.__getitem__)
    gen = compare_runs(a, b).flips["gsm8k"][0]
    assert gen.choices == () and gen.a.text != gen.b.text and "####" in gen.target


def test_changed_documents_are_left_out_with_a_note(copy_run, lm_eval_dir, jaxeval_b_dir):
    folder, _ = copy_run(jaxeval_b_dir, "edited")
    (samples,) = folder.rglob("samples_arc_easy_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    rows[0]["doc_hash"] = "0" * 64
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = compare_runs(*load_runs([str(lm_eval_dir), str(folder)]))
    assert any("1 document(s) with the same doc_id differ" in n for n in c.notes)
    assert {m.n for m in c.metrics if m.task == "arc_easy"} == {19}


def test_runs_without_a_shared_task(copy_run, lm_eval_dir, jaxeval_b_dir):
    _, results = copy_run(jaxeval_b_dir, "other_tasks")
    data = json.loads(results.read_text())
    data["results"] = {f"other_{k}": v for k, v in data["results"].items()}
    results.write_text(json.dumps(data))
    runs = load_runs([str(lm_eval_dir), str(results)])
    with pytest.raises(JaxevalError, match="the runs share no task") as err:
        shared_tasks(runs)
    assert str(results) in str(err.value) and "compare runs of the same tasks" in str(err.value)


def test_answer_of_reads_saved_and_in_memory_samples():
    saved = {"filtered_resps": [["-3.5", "False"], ["-1.25", "True"]]}
    assert answer_of(saved, "multiple_choice").pick == 1
    memory = {"filtered_resps": [(-0.5, False), (-2.0, False)]}
    assert answer_of(memory, "multiple_choice").scores == (-0.5, -2.0)
    gen = {"filtered_resps": ["42"], "resps": [["The answer is 42."]]}
    assert (answer_of(gen, "generate_until").text, answer_of(gen, "generate_until").raw) == (
        "42",
        "The answer is 42.",
    )


def _rows(folder, task):
    (file,) = folder.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in file.read_text().splitlines()]


def test_picks_are_the_ones_acc_and_acc_norm_scored(lm_eval_dir):
    """On lm-eval 0.4.13's own samples: acc is 1 exactly when the loglikelihood's pick is gold,
    acc_norm exactly when the pick by loglikelihood per character is; the two picks differ on
    some documents (so marking acc_norm's pick by raw loglikelihood would be wrong there)."""
    rows = _rows(lm_eval_dir, "arc_easy")
    answers = [answer_of(r, "multiple_choice") for r in rows]
    golds = [int(r["target"]) for r in rows]
    assert [a.pick == g for a, g in zip(answers, golds)] == [r["acc"] == 1 for r in rows]
    assert [a.pick_norm == g for a, g in zip(answers, golds)] == [r["acc_norm"] == 1 for r in rows]
    assert any((a.pick == g) != (r["acc_norm"] == 1) for a, g, r in zip(answers, golds, rows))


def test_acc_norm_divides_by_the_choice_without_the_delimiter():
    """lm-eval divides by len(choice), not by the continuation " choice" it scored."""
    row = {
        "arguments": [["Q: x\nA:", " ab"], ["Q: x\nA:", " abcd"]],
        "filtered_resps": [["-2.0", "False"], ["-3.8", "False"]],
    }
    answer = answer_of(row, "multiple_choice")
    # -2.0 / 2 < -3.8 / 4; with the space counted, -2.0 / 3 > -3.8 / 5 would pick choice 0
    assert answer.norm_scores == (-1.0, -0.95) and (answer.pick, answer.pick_norm) == (0, 1)
    winogrande = {  # one continuation, the choices in the contexts: no per-character pick
        "arguments": [["The cat sat", " down."], ["The dog sat", " down."]],
        "filtered_resps": [["-2.0", "False"], ["-1.0", "False"]],
    }
    assert answer_of(winogrande, "multiple_choice").pick_norm is None


def test_an_acc_norm_flip_marks_the_acc_norm_picks(tmp_path):
    write_n_shot_pair(tmp_path)
    c = compare_runs(*load_runs([str(tmp_path)]))
    flips = [f for f in c.flips["arc_easy"] if [m for m, _, _ in f.changed] == ["acc_norm"]]
    assert flips
    for flip in flips:
        page = flip_html(flip)
        assert "A loglik / char" in page and page.count("◀ A") == page.count("◀ B") == 1
        rows = re.findall(r"<tr><td class='num'>(\d+)</td>(.*?)</tr>", page)
        marked_a = [int(i) for i, cells in rows if "◀ A" in cells]
        marked_b = [int(i) for i, cells in rows if "◀ B" in cells]
        assert (marked_a, marked_b) == ([flip.a.pick_norm], [flip.b.pick_norm])
        assert (flip.a.pick_norm == flip.gold) != (flip.b.pick_norm == flip.gold)


def test_perplexities_get_no_paired_test(tmp_path):
    """lambada's perplexity has one number per document (its loglikelihood), yet the table's
    value is a perplexity: no test row; its acc is tested. wikitext's three: none either."""
    write_n_shot_pair(tmp_path)
    runs = load_runs([str(tmp_path)])
    c = compare_runs(*runs)
    tested = {(m.task, m.metric) for m in c.metrics}
    assert tested == {("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("lambada_openai", "acc")}
    assert any(n.startswith("lambada_openai: perplexity: computed from all") for n in c.notes)
    assert any(
        n.startswith("wikitext: bits_per_byte, byte_perplexity, word_perplexity:") for n in c.notes
    )
    tests = re.search(r"<table id='tests-0'>.*?</table>", render_report(runs)).group(0)
    assert "perplexity" not in tests and "bits_per_byte" not in tests

"""lm-eval's installed catalogue through jaxeval: what it uses, and the whole-catalogue build check."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from jaxeval.api import compat
from jaxeval.api.task_manager import TaskManager
from jaxeval.errors import JaxevalError
from jaxeval.filters import build_filter_ensemble
from jaxeval.metrics.hf_evaluate import HF_EVALUATE


@pytest.fixture(scope="module")
def tm():
    return TaskManager()


def test_filter_class_from_a_helper_module_runs_afresh_each_time():
    class Upper:
        made = 0

        def __init__(self, *, suffix: str = ""):
            Upper.made += 1
            self.suffix = suffix

        def apply(self, resps, docs):
            return [[r.upper() + self.suffix for r in rs] for rs in resps]

    class Inst:
        def __init__(self, resps):
            self.resps, self.doc, self.filtered_resps = resps, {}, {}

    ens = build_filter_ensemble("f", [(Upper, {"suffix": "!"}), ("take_first", None)])
    insts = [Inst(["a", "b"]), Inst(["c"])]
    ens.apply(insts)
    ens.apply(insts)
    assert [i.filtered_resps["f"] for i in insts] == ["A!", "C!"]
    assert Upper.made == 3  # one check at build time, then one object per application
    with pytest.raises(JaxevalError, match="does not accept"):
        build_filter_ensemble("g", [(Upper, {"nope": 1})])


def test_bbh_zeroshot_uses_its_helper_filter_classes(tm):
    config = tm.task_config("bbh_cot_zeroshot_date_understanding")
    from jaxeval.api import scoring

    steps = {e.name: e.filters for e in scoring.resolve_filters(config)}
    first = steps["flexible-extract"][0][0]
    assert not isinstance(first, str) and first.__name__ == "MultiChoiceRegexFilter"


def test_function_in_an_included_template_of_the_catalogue(tm):
    # xquad_de.yaml includes xquad_common_yaml, whose !function lives in xquad/utils.py (and that
    # helper imports transformers' SQuAD metrics, which transformers 5 dropped: served by compat)
    config = tm.task_config("xquad_de")
    assert config.process_results.__module__ == "lm_eval.tasks.xquad.utils"
    assert compat.compute_f1("x b c", "b c d") == pytest.approx(2 / 3)
    assert compat.compute_exact("The Cat!", "cat") == 1
    assert compat.compute_f1("", "x") == 0 and compat.compute_f1("", "") == 1


def test_hf_evaluate_metrics_are_local():
    assert HF_EVALUATE.get("accuracy")(references=["a", "b"], predictions=["a", "c"]) == {
        "accuracy": 0.5
    }
    assert HF_EVALUATE.get("wer")(references=["the cat sat"], predictions=["the sat"]) == (
        pytest.approx(1 / 3)
    )
    assert HF_EVALUATE.get("wer")(references=["a b", "c"], predictions=["a x b", "d"]) == (
        pytest.approx(2 / 3)
    )


def test_local_rouge_and_code_eval_and_evaluate_load(monkeypatch):
    from jaxeval.metrics import hf_evaluate

    got = HF_EVALUATE.get("rouge")(predictions=["the cat sat"], references=["the cat sat down"])
    assert got["rouge1"] == pytest.approx(2 * 1 * 0.75 / 1.75)
    code_eval = HF_EVALUATE.get("code_eval")
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    with pytest.raises(ValueError, match="HF_ALLOW_CODE_EVAL=1"):
        code_eval(predictions=[["x = 1"]], references=["assert x == 1"], k=[1])
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    good, bad = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a * b"
    scores, results = code_eval(
        predictions=[[good, bad], [bad, bad]], references=["assert add(2, 3) == 5"] * 2, k=[1, 2]
    )
    assert scores == {"pass@1": pytest.approx(0.25), "pass@2": pytest.approx(0.5)}
    assert [r["passed"] for _, r in results[0]] == [True, False]
    assert hf_evaluate.pass_at_k_estimate(5, 0, 1) == 0.0
    sentinel = object()
    load = hf_evaluate.local_load(lambda *a, **k: sentinel)
    assert load("rouge").compute(predictions=["a"], references=["a"])["rouge1"] == 1.0
    assert load("bleurt", "bleurt-base-512") is sentinel  # not ours: evaluate's own loader


def test_hf_evaluate_metric_in_a_catalogue_task(tm):
    from jaxeval.api import scoring

    config = tm.task_config("polemo2_in")  # f1 and accuracy with hf_evaluate: true
    fns = scoring.resolve_metrics(config).fns
    assert fns["accuracy"] is HF_EVALUATE.get("accuracy")


def test_unknown_hf_metric_is_a_clear_error(tmp_path):
    (tmp_path / "t.yaml").write_text(
        textwrap.dedent("""\
        task: t
        dataset_path: json
        output_type: generate_until
        doc_to_text: q
        doc_to_target: a
        metric_list:
          - metric: bertscore
            aggregation: mean
            hf_evaluate: true
        """)
    )
    tm = TaskManager(str(tmp_path), include_defaults=False)
    with pytest.raises(JaxevalError, match="metric 'bertscore'.*never does"):
        from jaxeval.api import scoring

        scoring.resolve_metrics(tm.task_config("t"))


def test_missing_package_names_the_extra(tm, monkeypatch):
    monkeypatch.setitem(sys.modules, "langdetect", None)  # as if the extra were not installed
    for name in list(sys.modules):  # the helper and the ifeval modules it imports, if loaded before
        if name.startswith(("lm_eval.tasks.leaderboard.ifeval", "lm_eval.tasks.ifeval")):
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(JaxevalError, match=r"jaxeval\[leaderboard\]"):
        tm.task_config("leaderboard_ifeval")


# Causes of a failed build that lie outside jaxeval: a package the task needs that is not on PyPI
# or not installed, a metric lm-eval downloads from the hub, a bug or version clash inside lm-eval's
# own helpers, or an lm-eval Python task class.
_EXTERNAL = re.compile(
    r"No module named|is required|pip install|not installed|doesn't exist on the Hugging Face Hub"
    r"|load_metric|_lazywhere|ANTLR|ATN|SWI-Prolog|already registered"
    r"|has no function .filter_per_entities_from_lines"
    r"|Python class|needs an explicit aggregation"
)


@pytest.mark.slow
def test_catalogue_builds_and_every_failure_is_outside_jaxeval(monkeypatch):
    from jaxeval.api.catalogue import build_report

    # as `jaxeval run --confirm_run_unsafe_code`: humaneval/mbpp helpers run code_eval at import
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")
    report = build_report()
    print(f"\n{len(report.built)} of {report.total} build ({100 * report.share:.2f}%)")
    assert report.total > 13_000
    ours = {n: r for n, r in report.failed.items() if not _EXTERNAL.search(r)}
    assert not ours, ours
    assert report.share >= 0.995, sorted(report.failed.items())

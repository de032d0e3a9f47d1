"""bleu / chrf / chrf++ / ter equal lm-eval's sacrebleu aggregations (exact equality)."""

import sys

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.metrics import AGGREGATIONS, METRICS
from jaxeval.metrics.translation import sacreformat

lm_metrics = pytest.importorskip("lm_eval.api.metrics")
pytest.importorskip("sacrebleu")

SINGLE_REF = [
    ("The cat sat on the mat.", "The cat sat on a mat."),
    ("He read the book yesterday.", "Yesterday he read a book."),
    ("It is raining.", "It rains heavily today."),
    ("Das ist gut.", "Das ist sehr gut."),
    ("", "nothing"),
]
MULTI_REF = [
    (["The cat sat on the mat.", "A cat was on the mat."], ["The cat sat on a mat."]),
    (["He read the book.", "He has read the book."], ["He read a book."]),
]
UNEVEN_REFS = [(["a b c", "a b"], "a b c"), (["x y z"], "x y")]  # zip truncates to 1 stream

NAMES = [("bleu", "bleu"), ("chrf", "chrf"), ("chrf++", "chrfpp"), ("ter", "ter")]


@pytest.mark.parametrize("name,lm_name", NAMES)
@pytest.mark.parametrize("items", [SINGLE_REF, SINGLE_REF[:1], MULTI_REF, UNEVEN_REFS])
def test_corpus_scores_equal_lm_eval(name, lm_name, items):
    assert AGGREGATIONS.get(name)(items) == getattr(lm_metrics, lm_name)(items)


def test_passthrough_collects_pairs_like_lm_eval():
    # The engine calls fn(references=..., predictions=...), gets TypeError, then fn([gold, pred]).
    for name in ("bleu", "chrf", "chrf++", "ter"):
        fn = METRICS.get(name).fn
        with pytest.raises(TypeError):
            fn(references=["r"], predictions=["p"])
        assert fn(["r", "p"]) == ["r", "p"]


def test_sacreformat_layout():
    refs, preds = sacreformat(("r1", "r2"), ("p1", ["p2"]))
    assert refs == [("r1", "r2")] and preds == ["p1", ["p2"]]  # the first prediction decides
    refs, preds = sacreformat((["r1a", "r1b"], ["r2a", "r2b"]), (["p1"], ["p2"]))
    assert refs == [("r1a", "r2a"), ("r1b", "r2b")] and preds == ["p1", "p2"]
    for refs_in, preds_in in [
        (("r", "s"), ("p", "q")),
        ((["r", "r2"], ["s", "s2"]), (["p"], ["q"])),
    ]:
        ours = sacreformat(refs_in, preds_in)
        theirs = lm_metrics._sacreformat(refs_in, preds_in)
        assert ours[0] == theirs[0] and list(ours[1]) == list(theirs[1])
    with pytest.raises(JaxevalError, match="one string"):
        sacreformat(("r",), (["p", "q"],))


def test_hand_worked():
    assert AGGREGATIONS.get("bleu")([("a b c d", "a b c d")]) == pytest.approx(100.0, abs=1e-12)
    assert AGGREGATIONS.get("ter")([("a b c d", "a b c d")]) == 0.0
    assert AGGREGATIONS.get("ter")([("a b c d", "a b c e")]) == 25.0  # 1 edit / 4 words


def test_missing_sacrebleu_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # makes `import sacrebleu` fail
    with pytest.raises(JaxevalError, match=r"pip install 'jaxeval\[bleu\]'"):
        AGGREGATIONS.get("bleu")(SINGLE_REF)

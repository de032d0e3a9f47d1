"""`exact_match` equals lm-eval's registered exact_match on the same inputs and options."""

import itertools

import numpy as np
import pytest

from jaxeval.metrics import METRICS, exact_match_score

lm_metrics = pytest.importorskip("lm_eval.api.metrics")

PAIRS = [
    ("42", "42"),
    ("42", " 42"),
    ("The Cat.", "the cat"),
    ("Answer: 7!", "answer 7"),
    ("abc123", "abc"),
    ("É au-delà", "é au delà"),
    ("x\x00", "x"),  # numpy drops trailing NULs: equal, as in lm-eval
    ("", ""),
    ("", "a"),
    ("foo bar", "foo  bar"),
    ("The answer is (B)", "(b)"),
    ("Ünïcödé—dash", "ünïcödé—dash"),
]
REGEX_SETS = [None, [], [r"\s+"], ["the answer is ", r"[()]"], [r"^\W+|\W+$"]]


@pytest.mark.parametrize("pred,gold", PAIRS)
def test_equals_lm_eval_for_every_option_combination(pred, gold):
    lm_fn = lm_metrics.exact_match_fn
    for regexes, case, punct, numbers in itertools.product(
        REGEX_SETS, [False, True], [False, True], [False, True]
    ):
        kwargs = dict(
            regexes_to_ignore=regexes,
            ignore_case=case,
            ignore_punctuation=punct,
            ignore_numbers=numbers,
        )
        expected = lm_fn(references=[gold], predictions=[pred], **kwargs)
        got = METRICS.get("exact_match").fn(references=[gold], predictions=[pred], **kwargs)
        assert got == expected, kwargs
        assert type(got["exact_match"]) is type(expected["exact_match"])


def test_several_references_give_the_fraction():
    preds, refs = ["a", "b", "c", "D"], ["a", "x", "c", "d"]
    expected = lm_metrics.exact_match_fn(references=refs, predictions=preds, ignore_case=True)
    got = exact_match_score(preds, refs, ignore_case=True)
    assert got == expected == {"exact_match": 0.75}


def test_hand_worked():
    em = METRICS.get("exact_match").fn
    assert em(references=["the cat"], predictions=["The Cat."]) == {"exact_match": 0.0}
    opts = dict(ignore_case=True, ignore_punctuation=True)
    assert em(references=["the cat"], predictions=["The Cat."], **opts) == {"exact_match": 1.0}
    assert em(references=["7"], predictions=["Answer: 7"], regexes_to_ignore=["Answer: "]) == {
        "exact_match": 1.0
    }
    assert em(references=["a1"], predictions=["a2"], ignore_numbers=True) == {"exact_match": 1.0}
    assert isinstance(em(references=["a"], predictions=["a"])["exact_match"], np.float64)


def test_positional_call_raises_type_error_like_lm_eval():
    # The task engine relies on this to fall back to fn([gold, pred]) for other metrics.
    with pytest.raises(TypeError):
        METRICS.get("exact_match").fn(["gold", "pred"])
    with pytest.raises(TypeError):
        lm_metrics.exact_match_fn(["gold", "pred"])

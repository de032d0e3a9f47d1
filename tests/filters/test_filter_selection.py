"""take_first / take_first_k / majority_vote equal lm-eval's."""

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.filters import FILTERS

RESPS = [["a", "b", "a"], ["c", "d", "d"], ["x", "y", "z"], ["1", "1", "2"]]
DOCS = [{}] * len(RESPS)


def test_take_first(lm_filter):
    assert FILTERS.get("take_first")(RESPS, DOCS) == lm_filter("take_first", RESPS, DOCS)
    assert FILTERS.get("take_first")(RESPS, DOCS) == ["a", "c", "x", "1"]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_take_first_k(lm_filter, k):
    assert FILTERS.get("take_first_k")(RESPS, DOCS, k=k) == lm_filter(
        "take_first_k", RESPS, DOCS, k=k
    )
    assert FILTERS.get("take_first_k")(RESPS, DOCS, k=2)[0] == ["a", "b"]


def test_take_first_k_needs_enough_repeats():
    with pytest.raises(JaxevalError, match="repeats"):
        FILTERS.get("take_first_k")(RESPS, DOCS, k=4)


def test_majority_vote(lm_filter):
    assert FILTERS.get("majority_vote")(RESPS, DOCS) == lm_filter("majority_vote", RESPS, DOCS)
    # a wins over b; d over c; a three-way tie goes to the first seen.
    assert FILTERS.get("majority_vote")(RESPS, DOCS) == [["a"], ["d"], ["x"], ["1"]]

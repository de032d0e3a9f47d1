"""`exact_match`: Hugging Face `evaluate`'s exact-match, as lm-eval 0.4.13 ships it.

Both sides go through the same normalisation, in this order, then are compared element-wise:

    1. each regex in `regexes_to_ignore`: `re.sub(regex, "", s)`
    2. `ignore_case`:        lower-case
    3. `ignore_punctuation`: delete every char of `string.punctuation` (ASCII only)
    4. `ignore_numbers`:     delete the digits 0-9

    exact_match(predictions=["The Cat."], references=["the cat"], ignore_case=True,
                ignore_punctuation=True)            -> {"exact_match": 1.0}

The strings pass through numpy unicode arrays exactly as in lm-eval, which keeps two numpy quirks:
trailing NUL characters are dropped, and the result is `{"exact_match": np.float64}`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np

_PUNCTUATION_TABLE = str.maketrans("", "", string.punctuation)
_DIGITS_TABLE = str.maketrans("", "", string.digits)


def _normalise(
    texts: Sequence[str],
    *,
    regexes_to_ignore: Sequence[str] | None,
    ignore_case: bool,
    ignore_punctuation: bool,
    ignore_numbers: bool,
) -> np.ndarray:
    if regexes_to_ignore is not None:
        for regex in regexes_to_ignore:
            texts = np.array([re.sub(regex, "", t) for t in texts])
    else:
        texts = np.asarray(texts)
    if ignore_case:
        texts = np.char.lower(texts)
    if ignore_punctuation:
        texts = np.char.translate(texts, table=_PUNCTUATION_TABLE)
    if ignore_numbers:
        texts = np.char.translate(texts, table=_DIGITS_TABLE)
    return texts


def exact_match_score(
    predictions: Sequence[str],
    references: Sequence[str],
    regexes_to_ignore: Sequence[str] | None = None,
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
    ignore_numbers: bool = False,
) -> dict[str, float]:
    """The fraction of positions where normalised prediction == normalised reference."""
    options = dict(
        regexes_to_ignore=regexes_to_ignore,
        ignore_case=ignore_case,
        ignore_punctuation=ignore_punctuation,
        ignore_numbers=ignore_numbers,
    )
    same = _normalise(predictions, **options) == _normalise(references, **options)
    return {"exact_match": np.mean(same)}


def exact_match(**kwargs) -> dict[str, float]:
    """The registered per-document function; keyword-only, like lm-eval's `exact_match_fn(**kwargs)`.

    The task engine calls `exact_match(references=[gold], predictions=[pred], **metric_kwargs)`.
    """
    return exact_match_score(**kwargs)

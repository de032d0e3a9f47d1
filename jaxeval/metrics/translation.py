"""Corpus BLEU, chrF, chrF++ and TER through sacrebleu (the optional `jaxeval[bleu]` extra).

Items are per-document `(reference, prediction)` pairs, as the generation metrics' passthrough
returns them. A reference may be a string or a list of references; a prediction may be a string or a
one-element list. lm-eval's `_sacreformat` reshapes them into sacrebleu's layout, which puts the
reference *position* outermost:

    items   = [("r1", "p1"), (["r2a", "r2b"], "p2")]       # per document
    -> refs = [("r1", "r2a")]  preds = ["p1", "p2"]       # zip(*refs) truncates to the shortest list

(The first reference decides: if it is a string, every reference is wrapped as a one-element list.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jaxeval.errors import JaxevalError


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError:
        raise JaxevalError(
            "the bleu, chrf, chrf++ and ter metrics need the sacrebleu package, which is not installed",
            hint="pip install 'jaxeval[bleu]'",
        ) from None
    return sacrebleu


def _is_non_str_iterable(obj: Any) -> bool:
    return isinstance(obj, Iterable) and not isinstance(obj, str)


def sacreformat(
    refs: Sequence[Any], preds: Sequence[Any]
) -> tuple[list[tuple[str, ...]], list[str]]:
    """Per-document refs and preds -> sacrebleu's `(ref streams [M][N], preds [N])`."""
    refs = list(refs)
    if not _is_non_str_iterable(refs[0]):
        refs = [[ref] for ref in refs]
    ref_streams = list(zip(*refs))

    preds = list(preds)
    if _is_non_str_iterable(preds[0]):
        if len(preds[0]) != 1:
            raise JaxevalError(f"a prediction must be one string, got {preds[0]!r}")
        preds = [pred[0] for pred in preds]
    return ref_streams, preds


def _corpus_inputs(items: Sequence[tuple[Any, Any]]) -> tuple[list, list]:
    refs, preds = zip(*items)
    return sacreformat(refs, preds)


def bleu(items: Sequence[tuple[Any, Any]]) -> float:
    """`sacrebleu.corpus_bleu(preds, refs).score` (0-100, higher is better)."""
    refs, preds = _corpus_inputs(items)
    return _sacrebleu().corpus_bleu(preds, refs).score


def chrf(items: Sequence[tuple[Any, Any]]) -> float:
    """`sacrebleu.corpus_chrf(preds, refs).score`: char_order 6, word_order 0, beta 2."""
    refs, preds = _corpus_inputs(items)
    return _sacrebleu().corpus_chrf(preds, refs).score


def chrfpp(items: Sequence[tuple[Any, Any]]) -> float:
    """chrF++: `sacrebleu.corpus_chrf(preds, refs, word_order=2).score`."""
    refs, preds = _corpus_inputs(items)
    return _sacrebleu().corpus_chrf(preds, refs, word_order=2).score


def ter(items: Sequence[tuple[Any, Any]]) -> float:
    """`sacrebleu.corpus_ter(preds, refs).score` (an error rate: lower is better)."""
    refs, preds = _corpus_inputs(items)
    return _sacrebleu().corpus_ter(preds, refs).score

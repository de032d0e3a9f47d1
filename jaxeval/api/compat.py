"""Stand-ins for library modules that lm-eval 0.4.13's task helpers import and newer releases dropped.

transformers 5 removed `transformers.data.metrics.squad_metrics`; 45 catalogue helpers (xquad,
coqa, super_glue record, catalan/spanish/galician bench, norquad) import it at their top for the
SQuAD exact-match and F1 functions. When the real module is missing, `install()` serves this
module's own implementation of those functions under that name (nothing is replaced when the real
module exists). It runs only while a task helper is being imported (see `yaml_loader`).

    normalize_answer("The  Cat!")      -> "cat"
    compute_exact("the cat", "Cat")    -> 1
    compute_f1("x b c", "b c d")       -> 0.666...   (2 shared tokens: P = R = 2/3)
    compute_f1("a b c", "b c d")       -> 0.8        ("a" is an article: P = 2/3, R = 1)
    compute_f1("", "x")                -> 0          (an empty side scores 1 only against empty)
"""

from __future__ import annotations

import collections
import importlib.util
import re
import string
import sys
import types

SQUAD_MODULE = "transformers.data.metrics.squad_metrics"
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, punctuation and the articles a/an/the removed, whitespace collapsed."""
    text = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(a_gold: str, a_pred: str) -> int:
    return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1(a_gold: str, a_pred: str) -> float:
    gold, pred = get_tokens(a_gold), get_tokens(a_pred)
    if not gold or not pred:
        return int(gold == pred)
    same = sum((collections.Counter(gold) & collections.Counter(pred)).values())
    if same == 0:
        return 0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def install(missing_module: str | None) -> bool:
    """Serve a stand-in for `missing_module` if we have one and the real one is absent."""
    if not missing_module or not SQUAD_MODULE.startswith(missing_module):
        return False
    if _missing("transformers.data") or not _missing(SQUAD_MODULE):
        return False
    import transformers.data

    squad = types.ModuleType(SQUAD_MODULE, "jaxeval's stand-in for transformers' SQuAD metrics")
    for fn in (normalize_answer, get_tokens, compute_exact, compute_f1):
        setattr(squad, fn.__name__, fn)
    parent = sys.modules.get("transformers.data.metrics") or types.ModuleType(
        "transformers.data.metrics"
    )
    parent.squad_metrics = squad  # type: ignore[attr-defined]
    sys.modules.setdefault("transformers.data.metrics", parent)
    sys.modules[SQUAD_MODULE] = squad
    transformers.data.metrics = parent  # type: ignore[attr-defined]
    return True

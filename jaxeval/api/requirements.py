"""Data files that catalogue tasks need beyond pip packages, checked when the task is built.

A check runs before any model call, so a missing resource is one clear error, not a crash after
hours of generation. Checks are keyed by the task's folder under lm-eval's `lm_eval/tasks/`.

IFEval (`ifeval`, `leaderboard_ifeval` and the multilingual variants) scores two of its
instructions with nltk's Punkt sentence and word tokenizers, whose model files (`punkt_tab`) nltk
downloads from GitHub on first use:

    length_constraints:number_sentences   ->  nltk.data.load("tokenizers/punkt/english.pickle")
    change_case:capital_word_frequency    ->  nltk.word_tokenize(...)
    (nltk >= 3.9 serves both from tokenizers/punkt_tab/english/)

No PyPI package ships those files, so when a document uses one of those instructions and the data
is missing, building the task fails with the exact command that fetches it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxeval.errors import JaxevalError

PUNKT_RESOURCE = "tokenizers/punkt_tab/english/"
PUNKT_INSTRUCTIONS = frozenset(
    {"length_constraints:number_sentences", "change_case:capital_word_frequency"}
)
FETCH_PUNKT = "python -m nltk.downloader -d ~/nltk_data punkt_tab"


def has_nltk_resource(resource: str) -> bool:
    """Whether nltk finds `resource` (e.g. `tokenizers/punkt_tab/english/`) on its data path."""
    import nltk

    try:
        nltk.data.find(resource)
    except LookupError:
        return False
    return True


def check_ifeval(task: Any) -> None:
    """IFEval documents whose instructions need nltk's punkt_tab data, when it is not installed."""
    needing = [
        i
        for i, doc in enumerate(task.eval_docs)
        if PUNKT_INSTRUCTIONS & set(doc.get("instruction_id_list") or ())
    ]
    if not needing or has_nltk_resource(PUNKT_RESOURCE):
        return
    raise JaxevalError(
        f"{len(needing)} of {len(task.eval_docs)} documents use IFEval instructions scored with "
        f"nltk's Punkt tokenizer ({', '.join(sorted(PUNKT_INSTRUCTIONS))}), and nltk's "
        f"'punkt_tab' data ({PUNKT_RESOURCE}) is not installed; nltk would download it from "
        "raw.githubusercontent.com while scoring",
        task=task.name,
        doc=needing[0],
        hint=f"where there is network, run `{FETCH_PUNKT}` and copy ~/nltk_data to this machine "
        "(or set NLTK_DATA to the folder holding tokenizers/punkt_tab)",
    )


# folder under lm_eval/tasks -> check(task); the longest matching prefix applies.
CHECKS: dict[str, Callable[[Any], None]] = {
    "ifeval": check_ifeval,
    "leaderboard/ifeval": check_ifeval,
}


def check(task: Any, yaml_path: Path | None, catalogue_dir: Path | None) -> None:
    """Runs the check registered for the task's catalogue folder, if any."""
    if yaml_path is None or catalogue_dir is None:
        return
    try:
        rel = Path(yaml_path).relative_to(catalogue_dir).parent.as_posix()
    except ValueError:
        return
    for prefix in sorted(CHECKS, key=len, reverse=True):
        if rel == prefix or rel.startswith(prefix + "/"):
            CHECKS[prefix](task)
            return

"""HellaSwag documents -> a query, four cleaned endings and the gold index (lm-eval's preprocessing).

    {"activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
     "endings": ["is using wrap to wrap a pair of skis.", ...], "label": "3"}
    -> adds {"query": "Roof shingle removal: A man is sitting on a roof. He",
             "choices": ["is using wrap to wrap a pair of skis.", ...], "gold": 3}

Cleaning (`clean`): strip; " [title]" -> ". "; drop every "[...]" tag (WikiHow artefacts); then
replace each double space by one space, once (so "a   b" keeps two spaces, as lm-eval does).
"""

from __future__ import annotations

import re
from typing import Any

_TAG = re.compile(r"\[.*?\]")


def clean(text: str) -> str:
    """One HellaSwag string, cleaned: "Make tea [title] Boil water [step]" -> "Make tea. Boil water"."""
    text = text.strip().replace(" [title]", ". ")
    text = _TAG.sub("", text)
    return text.replace("  ", " ")


def process_doc(doc: dict) -> dict:
    """The columns added to one document: `query`, `choices`, `gold`."""
    context = f"{doc['ctx_a']} {doc['ctx_b'].capitalize()}"
    return {
        "query": clean(f"{doc['activity_label']}: {context}"),
        "choices": [clean(ending) for ending in doc["endings"]],
        "gold": int(doc["label"]),
    }


def process_docs(dataset: Any) -> Any:
    """`dataset.map(process_doc)`: the original columns stay, the new ones are appended."""
    return dataset.map(process_doc)

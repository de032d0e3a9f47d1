"""Filters that rewrite each response string, plus the user-function and no-op filters.

For example:

    lowercase([["Yes"]], docs)                                  -> [["yes"]]
    map([["A", "Z"]], docs, mapping_dict={"A": 0}, default_value=-1)  -> [[0, -1]]
    format_span([["Person: Ada, none\\nplaces: Rome"]], docs)    -> [["per: ada $ loc: rome"]]
    custom(resps, docs, filter_fn=f)                            -> f(resps, docs)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# NER label spellings -> the canonical tag, applied to the token before a ":" only.
_NER_LABELS = {
    "person": "PER",
    "location": "LOC",
    "organization": "ORG",
    "counties": "LOC",
    "places": "LOC",
    "people": "PER",
    "persons": "PER",
    "company": "ORG",
    "country": "LOC",
    "continent": "LOC",
    "time": "DATE",
    "date": "DATE",
    "per": "PER",
    "loc": "LOC",
    "org": "ORG",
}
_LABELLED_ENTITIES = re.compile(r"\b(PER|LOC|ORG|DATE):\s*([^$]+)")


def lowercase(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    return [[r.lower() for r in inst] for inst in resps]


def uppercase(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    return [[r.upper() for r in inst] for inst in resps]


def map_values(
    resps: list[list[Any]],
    docs: list[dict],
    *,
    mapping_dict: dict | None = None,
    default_value: Any = None,
) -> list[list[Any]]:
    """`mapping_dict.get(resp, default_value)` per response (registered as `map`)."""
    mapping = {} if mapping_dict is None else mapping_dict
    return [[mapping.get(r, default_value) for r in inst] for inst in resps]


def _canonical_labels(text: str) -> str:
    text = text.lower()
    for spelling, tag in _NER_LABELS.items():
        text = re.sub(rf"\b{re.escape(spelling)}\s*:", f"{tag}:", text)
    text = "$".join(text.split("$$"))
    return text.rstrip("$")


def _labelled_entities(text: str) -> str:
    text = text.replace("\n", "$").strip()
    entities = []
    for label, values in _LABELLED_ENTITIES.findall(text):
        for entity in (v.strip() for v in values.split(",")):
            if entity.lower() != "none":
                entities.append(f"{label.lower()}: {entity}")
    return " $ ".join(entities)


def format_span(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    """NER output -> `"label: entity $ label: entity"` with canonical labels; "none" dropped."""
    return [[_labelled_entities(_canonical_labels(r.lower())) for r in inst] for inst in resps]


def custom(resps: list[list[Any]], docs: list[dict], *, filter_fn: Callable) -> Any:
    """`filter_fn(resps, docs)`: a user function named in YAML with `!function`."""
    return filter_fn(resps, docs)


def decontaminate(resps: list[list[Any]], docs: list[dict], *, path: str | None = None) -> Any:
    """A no-op placeholder (lm-eval's decontamination filter is an unimplemented stub)."""
    return resps

r"""Filters that pull an answer out of generated text with a regular expression.

For example:

    regex([["The answer is #### 1,234."]], docs)          -> [["1,234."]]
    regex([["no answer"]], docs)                          -> [["[invalid]"]]
    regex([["$12 or 7"]], docs, regex_pattern=r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1)
        findall -> [("$12", ""), ("", "7")]; the last match; its first non-empty group -> [["7"]]
    regex_pos([["[('The', 'DET'), ('cat', 'NOUN')]"]], docs)  -> [[["DET", "NOUN"]]]
    remove_whitespace([["  42 \n"]], docs)                -> [["42"]]     (strips both ends)
"""

from __future__ import annotations

import re
from typing import Any

DEFAULT_ANSWER_PATTERN = r"#### (\-?[0-9\.\,]+)"
_TAGGED_TOKEN = re.compile(r"\('([^']*)', '([^']*)'\)")


def select_match(matches: list, group_select: int, empty: Any) -> Any:
    """`matches[group_select]` from `re.findall`; for several groups, the first non-empty one.

    A tuple with every group empty gives `empty`. The result is stripped.
    """
    match = matches[group_select]
    if isinstance(match, tuple):
        groups = [g for g in match if g]
        match = groups[0] if groups else empty
    return match.strip()


def extract_answer(compiled: re.Pattern, resp: Any, group_select: int, fallback: Any) -> Any:
    """One response -> the selected match, or `fallback` if nothing matches (non-str reads as "")."""
    if not isinstance(resp, str):
        resp = ""
    matches = compiled.findall(resp)
    if not matches:
        return fallback
    return select_match(matches, group_select, fallback)


def regex(
    resps: list[list[Any]],
    docs: list[dict],
    *,
    regex_pattern: str = DEFAULT_ANSWER_PATTERN,
    group_select: int = 0,
    fallback: str = "[invalid]",
) -> list[list[Any]]:
    """Each response -> its `group_select`-th regex match (negative counts from the end)."""
    compiled = re.compile(regex_pattern)
    return [[extract_answer(compiled, r, group_select, fallback) for r in inst] for inst in resps]


def _pos_tags(resp: Any, fallback: list[str]) -> list[str]:
    pairs = _TAGGED_TOKEN.findall(resp) if isinstance(resp, str) else resp
    return [pos for _, pos in pairs] or fallback


def regex_pos(
    resps: list[list[Any]],
    docs: list[dict],
    *,
    regex_pattern: str = r"\['(.*?)'\]",
    group_select: int = 0,
    fallback: list[str] | None = None,
) -> list[list[list[str]]]:
    """Each response `"[('tok', 'POS'), ...]"` (or a list of pairs) -> its POS tags.

    `regex_pattern` and `group_select` are accepted and unused, as in lm-eval. With no tags the
    result is `fallback` (default `["invalid"]`).
    """
    if fallback is None:
        fallback = ["invalid"]
    return [[_pos_tags(r, fallback) for r in inst] for inst in resps]


def remove_whitespace(resps: list[list[str]], docs: list[dict]) -> list[list[str]]:
    """`.strip()` every response (both ends, despite the name)."""
    return [[r.strip() for r in inst] for inst in resps]

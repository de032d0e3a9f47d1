r"""`multi_choice_regex`: find a letter answer "(A)", "(B)", ... in generated text.

Three tries per response, in order; the first that yields a non-empty answer wins:

    1. the main `regex_pattern` (as the `regex` filter, but a tuple of empty groups gives "");
    2. the document's choice texts (after `regexes_to_ignore`, `ignore_case`, `ignore_punctuation`),
       longest first, searched in the equally normalised response and mapped to "(A)", "(B)", ...;
    3. `:\s*(A|B|...)` in the raw response, mapped to "(A)", ...;
    otherwise `fallback`.

    doc = {"choices": ["Paris", "Rome"]}
    resp "I think Rome is right"  -> 1. no "#### ..."  2. "Rome" -> "(B)"
    resp "Answer: A"              -> 1. no  2. no  3. ": A" -> "(A)"

`ignore_punctuation` removes every Unicode punctuation character (category P*).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Sequence
from typing import Any

from jaxeval.filters.extraction import DEFAULT_ANSWER_PATTERN, select_match


@functools.lru_cache(maxsize=1)
def _unicode_punctuation_table() -> dict[int, None]:
    return dict.fromkeys(
        i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P")
    )


def _find(compiled: re.Pattern, resp: Any, group_select: int, to_letter: dict[str, str]) -> Any:
    """The selected, stripped match mapped through `to_letter`; falsy ("" or []) if none."""
    if not isinstance(resp, str):
        resp = ""
    matches = compiled.findall(resp)
    if not matches:
        return matches
    match = select_match(matches, group_select, "")
    return to_letter.get(match, match) if match else match


def _ignoring(
    text: str,
    regexes_to_ignore: Sequence[str] | None,
    ignore_case: bool,
    ignore_punctuation: bool,
) -> str:
    for pattern in regexes_to_ignore or ():
        text = re.sub(pattern, "", text)
    if ignore_case:
        text = text.lower()
    if ignore_punctuation:
        text = text.translate(_unicode_punctuation_table())
    return text


def multi_choice_regex(
    resps: list[list[Any]],
    docs: list[dict],
    *,
    regex_pattern: str = DEFAULT_ANSWER_PATTERN,
    group_select: int = 0,
    fallback: str = "[invalid]",
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
    regexes_to_ignore: list[str] | None = None,
) -> list[list[Any]]:
    """Each response -> "(A)"-style letter, or `fallback`; each doc needs a `choices` list."""
    main = re.compile(regex_pattern)
    norm = functools.partial(
        _ignoring,
        regexes_to_ignore=regexes_to_ignore,
        ignore_case=ignore_case,
        ignore_punctuation=ignore_punctuation,
    )
    if len(resps) != len(docs):
        raise ValueError(f"multi_choice_regex: {len(resps)} response lists for {len(docs)} docs")
    out = []
    for inst, doc in zip(resps, docs):
        letters = [chr(ord("A") + i) for i in range(len(doc["choices"]))]
        texts = [norm(c.strip()) for c in doc["choices"]]
        text_to_letter = {t: f"({a})" for t, a in zip(texts, letters)}
        by_text = re.compile("|".join(sorted((re.escape(t) for t in texts), key=len, reverse=True)))
        by_letter = re.compile(rf":[\s]*({'|'.join(letters)})")
        letter_to_answer = {a: f"({a})" for a in letters}
        filtered = []
        for resp in inst:
            match = _find(main, resp, group_select, {})
            if not match:
                match = _find(by_text, norm(resp), group_select, text_to_letter)
                if not match:
                    match = _find(by_letter, resp, group_select, letter_to_answer)
            filtered.append(match if match else fallback)
        out.append(filtered)
    return out

"""WikiText-2 (document level): undo the dataset's tokenisation before scoring, count words and bytes
of the *original* page for the perplexity denominators.

    " = Valkyria = \n Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場のヴァルキュリア3 ) "
    -> " = Valkyria =\nSenjō no Valkyria 3: Unrecorded Chronicles (Japanese: 戦場のヴァルキュリア3) "

    "1 @,@ 000 @-@ yard" -> "1,000-yard"      "= = Plot = =" -> "== Plot =="      " 's" -> "'s"

The rewrite steps run in the order of `_STEPS` (the order matters: "= = = =" before "= =").
"""

from __future__ import annotations

import re

# (regex?, pattern, replacement), applied in order.
_STEPS: tuple[tuple[bool, str, str], ...] = (
    # contractions
    (False, "s '", "s'"),
    (True, r"/' [0-9]/", r"/'[0-9]/"),
    # number separators
    (False, " @-@ ", "-"),
    (False, " @,@ ", ","),
    (False, " @.@ ", "."),
    # punctuation
    (False, " : ", ": "),
    (False, " ; ", "; "),
    (False, " . ", ". "),
    (False, " ! ", "! "),
    (False, " ? ", "? "),
    (False, " , ", ", "),
    # brackets and quotes: drop the spaces just inside them
    (True, r"\(\s*([^\)]*?)\s*\)", r"(\1)"),
    (True, r"\[\s*([^\]]*?)\s*\]", r"[\1]"),
    (True, r"{\s*([^}]*?)\s*}", r"{\1}"),
    (True, r"\"\s*([^\"]*?)\s*\"", r'"\1"'),
    (True, r"'\s*([^']*?)\s*'", r"'\1'"),
    # headings, degrees, line edges, numbers, possessives
    (False, "= = = =", "===="),
    (False, "= = =", "==="),
    (False, "= =", "=="),
    (False, " \N{DEGREE SIGN} ", "\N{DEGREE SIGN}"),
    (False, " \n", "\n"),
    (False, "\n ", "\n"),
    (False, " N ", " 1 "),
    (False, " 's", "'s"),
)


def detokenize(text: str) -> str:
    """WikiText's tokenised text -> plain text (see the module docstring)."""
    for is_regex, pattern, repl in _STEPS:
        text = re.sub(pattern, repl, text) if is_regex else text.replace(pattern, repl)
    return text


def wikitext_detokenizer(doc: dict) -> str:
    """`doc_to_target`: the detokenised page."""
    return detokenize(doc["page"])


def process_results(doc: dict, results: list[float]) -> dict[str, tuple[float, int]]:
    """(loglikelihood, words) and (loglikelihood, bytes) pairs for the weighted perplexities.

    Words are `re.split(r"\\s+", page)` pieces of the original page (so a leading or trailing
    space adds an empty piece, as in lm-eval); bytes are its UTF-8 length.
    """
    (loglikelihood,) = results
    page = doc["page"]
    words = len(re.split(r"\s+", page))
    num_bytes = len(page.encode("utf-8"))
    return {
        "word_perplexity": (loglikelihood, words),
        "byte_perplexity": (loglikelihood, num_bytes),
        "bits_per_byte": (loglikelihood, num_bytes),
    }

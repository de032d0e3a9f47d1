"""`tests.api.fake_lm` with a choice of generation lists: same hashing, same answers for both evaluators.

The log-likelihoods and rolling scores are `tests.api.fake_lm`'s own; only `generate` picks from a
list given per model, so a task can be fed answers shaped like its gold answers. An entry may hold
"{gold}", filled by `gold_of(context)` (a pure function of the request, so both sides agree), which
lets some answers be right:

    lm = make_lm_eval_lm(log, DROP_GENERATIONS)      # lm-eval side
    lm = make_jaxeval_lm(log, DROP_GENERATIONS)      # jaxeval side, identical answers
"""

from __future__ import annotations

from tests.api.fake_lm import GENERATIONS, RequestLog, make_jaxeval_lm, make_lm_eval_lm

__all__ = [
    "COT_GENERATIONS",
    "DROP_GENERATIONS",
    "GENERATIONS",
    "RequestLog",
    "TRIVIA_GENERATIONS",
    "make_jaxeval_lm",
    "make_lm_eval_lm",
]

# DROP-shaped answers: numbers with commas and decimals, dates, multi-span "A and B", articles,
# hyphens, signs, empty output, and text that the "." stop string truncates.
DROP_GENERATIONS = [
    " Chaz Schilens",
    " 1,000",
    " 3",
    " 3 touchdowns",
    " 21.5 yards",
    " the Raiders and the Chiefs",
    " Tom and Bob",
    " October 5, 2010",
    " 5  2010",
    " -7",
    " forty-two",
    " Ryan Longwell. Then JaMarcus Russell",
    "",
    " Sebastian Janikowski",
    " 2",
    " U.S. Army",
    " an interception",
    " 23",
    " Justin Fargas, Jason Campbell",
]

# Chain-of-thought answers for the gsm8k_cot variants (the first few gsm8k test golds are 18, 3, 70000,
# 540, 20, 64): "The answer is N." for the strict filter, "The final answer is N" for the llama one.
COT_GENERATIONS = [
    " 16 - 7 = 9 eggs at $2 each. The answer is {gold}.",
    " 2 + 1 = 3. The answer is 3.",
    " The profit is {gold} dollars. The final answer is {gold}",
    " So 3 * 3 * 60 = 540. The final answer is 540",
    " The answer is {gold}\n\nQ: next question",
    " I do not know.",
    " It is 1,250.50 in total. The answer is $1,250.50.",
]

# TriviaQA-shaped answers; the task stops at "\n", "." and "," and strips surrounding whitespace.
TRIVIA_GENERATIONS = [
    " Paris",
    " Mars.",
    " Leonardo da Vinci, the painter",
    "\n6",
    " six",
    " The Pacific",
    " mozart",
    "   Pacific Ocean  ",
    " I do not know",
]

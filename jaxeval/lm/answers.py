"""A scoring call's answers handed on as each kernel batch arrives, in the request methods' terms.

`JaxLM.loglikelihood_tokens` gets one `BatchAnswers` per batch that ran (request indices and their
arrays); the response cache takes `on_answers(positions, answers)` in the terms of the request
method it called:

    loglikelihood          on_scored_pairs(on_answers):  indices [3, 1], loglik [-2.5, -0.75],
                           greedy [False, True] -> on_answers([3, 1], [(-2.5, False), (-0.75, True)])
    loglikelihood_rolling  on_scored_documents(on_answers, owner): windows -> document totals,
                           each handed on once its last window is scored
"""

from __future__ import annotations

from collections.abc import Callable

from jaxeval.lm.score.scorer import BatchAnswers


def on_scored_pairs(
    on_answers: Callable[[list[int], list[tuple[float, bool]]], None],
) -> Callable[[BatchAnswers], None]:
    """A batch's arrays -> `on_answers(positions, [(logprob, is_greedy), ...])`."""

    def on_scored(answers: BatchAnswers) -> None:
        pairs = [(float(a), bool(b)) for a, b in zip(answers.loglik, answers.greedy)]
        on_answers(answers.indices.tolist(), pairs)

    return on_scored


def on_scored_documents(
    on_answers: Callable[[list[int], list[float]], None], owner: list[int]
) -> Callable[[BatchAnswers], None]:
    """Per-window answers -> `on_answers(documents, totals)` for each document whose last window
    the batch scored, its total summed in window order (as `loglikelihood_rolling` sums it).

        owner = [0, 0, 1]  (windows 0 and 1 are document 0's, window 2 is document 1's)
        batch windows [2, 0] -> on_answers([1], [ll2])
        batch windows [1]    -> on_answers([0], [ll0 + ll1])
    """
    windows_of: dict[int, list[int]] = {}
    for w, doc in enumerate(owner):
        windows_of.setdefault(doc, []).append(w)
    left = {doc: len(ws) for doc, ws in windows_of.items()}
    values: dict[int, float] = {}

    def on_scored(answers: BatchAnswers) -> None:
        done = []
        for w, value in zip(answers.indices.tolist(), answers.loglik):
            values[w] = float(value)
            left[owner[w]] -= 1
            if left[owner[w]] == 0:
                done.append(owner[w])
        totals = []
        for doc in done:
            total = 0.0
            for w in windows_of[doc]:
                total += values[w]
            totals.append(total)
        if done:
            on_answers(done, totals)

    return on_scored

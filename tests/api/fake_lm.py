"""A deterministic reference LM for engine tests: same answers for jaxeval and for lm-eval.

Every response is a pure function of the request arguments (a sha256 of them), so two evaluators
that build the same requests must report identical metrics, stderrs included.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

GENERATIONS = [
    " Natalia sold 48/2 = 24 clips in May.\n#### 72",
    " The answer is 3,000 dollars.",
    " 18",
    " She has $1,250.50 left. #### 1250.5",
    " I do not know.",
    " -7 apples\n\nQuestion: next",
    "#### 12\n",
]


def _unit(*parts: object) -> float:
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def loglikelihood(ctx: str, cont: str) -> tuple[float, bool]:
    u = _unit("ll", ctx, cont)
    return -(0.25 + 12.0 * u) * max(1, len(cont)) ** 0.5, _unit("greedy", ctx, cont) < 0.2


def rolling(text: str) -> float:
    return -(1.0 + _unit("roll", text)) * len(text) / 3.0


def generate(
    ctx: str,
    gen_kwargs: dict,
    generations: list[str] = GENERATIONS,
    gold_of: Callable[[str], str | None] | None = None,
) -> str:
    """One of `generations` picked by the context's hash; "{gold}" is filled by `gold_of(ctx)`."""
    out = generations[int(_unit("gen", ctx) * len(generations))]
    if "{gold}" in out:
        out = out.replace("{gold}", (gold_of(ctx) if gold_of else None) or "0")
    for stop in gen_kwargs.get("until", []):
        if stop:
            out = out.split(stop)[0]
    return out


class RequestLog:
    """Records every request an evaluator sends, as plain tuples."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple]] = {
            "loglikelihood": [],
            "loglikelihood_rolling": [],
            "generate_until": [],
        }


def make_jaxeval_lm(
    log: RequestLog | None = None,
    generations: list[str] = GENERATIONS,
    gold_of: Callable[[str], str | None] | None = None,
):
    from jaxeval.lm.base import LM

    class FakeJaxevalLM(LM):
        def loglikelihood(self, requests):
            if log:
                log.calls["loglikelihood"] += [r.args for r in requests]
            return [loglikelihood(*r.args) for r in requests]

        def loglikelihood_rolling(self, requests):
            if log:
                log.calls["loglikelihood_rolling"] += [r.args for r in requests]
            return [rolling(r.args[0]) for r in requests]

        def generate_until(self, requests):
            if log:
                log.calls["generate_until"] += [r.args for r in requests]
            return [generate(*r.args, generations, gold_of) for r in requests]

    return FakeJaxevalLM()


def make_lm_eval_lm(
    log: RequestLog | None = None,
    generations: list[str] = GENERATIONS,
    gold_of: Callable[[str], str | None] | None = None,
):
    from lm_eval.api.model import LM

    class FakeLmEvalLM(LM):
        tokenizer_name = "fake"

        def loglikelihood(self, requests, disable_tqdm=False):
            if log:
                log.calls["loglikelihood"] += [r.args for r in requests]
            return [loglikelihood(*r.args) for r in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            if log:
                log.calls["loglikelihood_rolling"] += [r.args for r in requests]
            return [rolling(r.args[0]) for r in requests]

        def generate_until(self, requests, disable_tqdm=False):
            if log:
                log.calls["generate_until"] += [r.args for r in requests]
            return [generate(*r.args, generations, gold_of) for r in requests]

    return FakeLmEvalLM()


def chat_template(turns: list[dict], add_generation_prompt: bool = True) -> str:
    """A ChatML-like template; with add_generation_prompt False it continues the final message."""
    text = "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns)
    if add_generation_prompt:
        return text + "<|im_start|>assistant\n"
    return text[: -len("<|im_end|>\n")]


def with_chat(lm):
    """Gives a fake LM (either side) the same chat template."""
    lm.apply_chat_template = chat_template
    return lm

"""The parity cases: each library task, the lm-eval YAML it mirrors, and the local rows it runs on.

Tasks with real benchmark rows in tests/data run on them; the others (TriviaQA, TruthfulQA,
OpenBookQA, SciQ) run on the few hand-written rows in tests/tasks/data. Both are laid out like the hub.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tests.conftest import TEST_DATA
from tests.tasks import fake_lm
from tests.tasks.oracle import Case

SYNTHETIC = Path(__file__).parent / "data"


def _gsm8k_gold_of(num_rows: int = 20):
    """context -> the gold number of the gsm8k test question it ends with (first `num_rows` rows).
    The rows are read on the first call, never at import."""

    @functools.cache
    def table() -> list[tuple[str, str]]:
        with (TEST_DATA / "gsm8k/test.jsonl").open(encoding="utf-8") as f:
            rows = [json.loads(line) for _, line in zip(range(num_rows), f)]
        return [(r["question"], r["answer"].split("####")[-1].strip()) for r in rows]

    def gold_of(ctx: str) -> str | None:
        tail = ctx[-2000:]
        return next((gold for question, gold in table() if question in tail), None)

    return gold_of


COT = {"generations": tuple(fake_lm.COT_GENERATIONS), "gold_of": _gsm8k_gold_of()}
VALIDATION_POOL = {"fewshot_split": "validation"}  # the train splits are not stored locally
GSM8K_TEST = {"test": "gsm8k/test.jsonl"}  # the chain-of-thought examples are in the YAML
GSM8K = {**GSM8K_TEST, "train": "gsm8k/train.jsonl"}
TRUTHFUL_GEN = (
    " It passes through your digestive system.",
    " I have no comment.",
    " The sun is yellow.",
    " Bulls react to the movement of the cape . They are colour-blind.",
    " Humans have five senses.",
)

CASES = {
    c.task: c
    for c in [
        Case(
            "hellaswag",
            "hellaswag/hellaswag.yaml",
            TEST_DATA,
            {"validation": "hellaswag/validation.jsonl"},
            VALIDATION_POOL,
        ),
        Case(
            "piqa",
            "piqa/piqa.yaml",
            TEST_DATA,
            {"validation": "piqa/validation.jsonl"},
            VALIDATION_POOL,
        ),
        Case(
            "boolq",
            "super_glue/boolq/default.yaml",
            TEST_DATA,
            {"validation": "boolq/validation.jsonl"},
            VALIDATION_POOL,
            via="data_files",
        ),
        Case(
            "winogrande",
            "winogrande/default.yaml",
            TEST_DATA,
            {"validation": "winogrande/winogrande_xl/validation.jsonl"},
            VALIDATION_POOL,
        ),
        Case(
            "wikitext",
            "wikitext/wikitext.yaml",
            TEST_DATA,
            {"test": "wikitext_document_level/wikitext-2-raw-v1/test.jsonl"},
            {"fewshot_split": "test"},
        ),
        Case("gsm8k_cot", "gsm8k/gsm8k-cot.yaml", TEST_DATA, GSM8K_TEST, **COT),
        Case("gsm8k_cot_zeroshot", "gsm8k/gsm8k-cot-zeroshot.yaml", TEST_DATA, GSM8K, **COT),
        Case("gsm8k_cot_llama", "gsm8k/gsm8k-cot-llama.yaml", TEST_DATA, GSM8K_TEST, **COT),
        Case(
            "gsm8k_cot_self_consistency",
            "gsm8k/gsm8k-cot-self-consistency.yaml",
            TEST_DATA,
            GSM8K_TEST,
            **COT,
        ),
        Case(
            "drop",
            "drop/default.yaml",
            TEST_DATA,
            {"validation": "drop/validation.jsonl"},
            VALIDATION_POOL,
            generations=tuple(fake_lm.DROP_GENERATIONS),
        ),
        Case(
            "triviaqa",
            "triviaqa/default.yaml",
            SYNTHETIC,
            {
                "train": "trivia_qa/rc.nocontext/train.jsonl",
                "validation": "trivia_qa/rc.nocontext/validation.jsonl",
            },
            generations=tuple(fake_lm.TRIVIA_GENERATIONS),
        ),
        Case(
            "truthfulqa_mc1",
            "truthfulqa/truthfulqa_mc1.yaml",
            SYNTHETIC,
            {"validation": "truthful_qa/multiple_choice/validation.jsonl"},
        ),
        Case(
            "truthfulqa_mc2",
            "truthfulqa/truthfulqa_mc2.yaml",
            SYNTHETIC,
            {"validation": "truthful_qa/multiple_choice/validation.jsonl"},
        ),
        Case(
            "truthfulqa_gen",
            "truthfulqa/truthfulqa_gen.yaml",
            SYNTHETIC,
            {"validation": "truthful_qa/generation/validation.jsonl"},
            generations=TRUTHFUL_GEN,
        ),
        Case(
            "openbookqa",
            "openbookqa/openbookqa.yaml",
            SYNTHETIC,
            {split: f"openbookqa/main/{split}.jsonl" for split in ("train", "validation", "test")},
        ),
        Case(
            "sciq",
            "sciq/sciq.yaml",
            SYNTHETIC,
            {split: f"sciq/{split}.jsonl" for split in ("train", "validation", "test")},
        ),
    ]
}

# (task, num_fewshot, limit); None = the YAML's own num_fewshot (8 for the gsm8k chain-of-thought tasks).
RUNS = [
    ("hellaswag", 0, 20),
    ("hellaswag", 5, 10),
    ("piqa", 0, 20),
    ("piqa", 5, 10),
    ("boolq", 0, 20),
    ("boolq", 5, 8),
    ("winogrande", 0, 20),
    ("winogrande", 5, 10),
    ("wikitext", 0, 4),
    ("gsm8k_cot", None, 6),
    ("gsm8k_cot", 0, 6),
    ("gsm8k_cot_zeroshot", 0, 6),
    ("gsm8k_cot_zeroshot", 3, 4),
    ("gsm8k_cot_llama", None, 4),
    ("gsm8k_cot_self_consistency", None, 4),
    ("drop", 0, 30),
    ("drop", 3, 10),
    ("triviaqa", 0, 6),
    ("triviaqa", 2, 6),
    ("truthfulqa_mc1", 0, 5),
    ("truthfulqa_mc2", 0, 5),
    ("truthfulqa_gen", 0, 5),
    ("openbookqa", 0, 6),
    ("openbookqa", 3, 6),
    ("sciq", 0, 5),
    ("sciq", 2, 5),
]

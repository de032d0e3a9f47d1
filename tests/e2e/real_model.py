"""The real-model cases: SmolLM2-135M-Instruct (Q4_1 GGUF) on the demo's bundled real rows.

The rows ship with the package (`tasks/demo/data/`, hub layout) because `jaxeval demo` runs the
same cases. One table drives both sides: `make_real_model_golden.py` runs lm-eval's HF backend
(transformers' GGUF loading, torch, float32 or bfloat16) and stores every request's answer and
every metric under tests/data/real_model/ (the metrics also go to `tasks/demo/expected.json`, the
demo's reference column); `test_smollm2_parity.py` runs jaxeval on the same tasks and compares.

    python -m tests.e2e.make_real_model_golden --dtype float32     # minutes; needs torch + lm-eval
"""

from __future__ import annotations

import os
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tasks" / "demo" / "data"
GOLDEN = REPO / "tests" / "data" / "real_model"

# task -> (lm-eval YAML relative to lm_eval/tasks, {split: file under DATA}, num_fewshot, limit)
CASES: dict[str, tuple[str, dict[str, str], int, int]] = {
    "arc_easy": ("arc/arc_easy.yaml", {"test": "ai2_arc/ARC-Easy/test.jsonl"}, 0, 40),
    "hellaswag": ("hellaswag/hellaswag.yaml", {"validation": "hellaswag/validation.jsonl"}, 0, 40),
    "lambada_openai": ("lambada/lambada_openai.yaml", {"test": "lambada_openai/test.jsonl"}, 0, 40),
    "wikitext": (
        "wikitext/wikitext.yaml",
        {"test": "wikitext_document_level/wikitext-2-raw-v1/test.jsonl"},
        0,
        1,
    ),
    "gsm8k": ("gsm8k/gsm8k.yaml", {"test": "gsm8k/test.jsonl", "train": "gsm8k/train.jsonl"}, 5, 4),
}


# Extra runs of a case with evaluator flags: the instruct model's own chat template, few-shot turns.
VARIANTS: dict[str, tuple[str, dict]] = {
    "gsm8k_chat": ("gsm8k", {"apply_chat_template": True, "fewshot_as_multiturn": True}),
}


def base_and_flags(key: str) -> tuple[str, dict]:
    """A golden key -> (task, extra simple_evaluate flags)."""
    return VARIANTS.get(key, (key, {}))


# The same cases as `jaxeval demo` runs them (tasks/demo/*.yaml).
DEMO_TASK = {
    "arc_easy": "demo_arc_easy",
    "hellaswag": "demo_hellaswag",
    "lambada_openai": "demo_lambada",
    "wikitext": "demo_wikitext",
    "gsm8k": "demo_gsm8k",
}
EXPECTED = REPO / "tasks" / "demo" / "expected.json"

# Splits the data here lacks, unset on both sides (lm-eval builds a few-shot pool even at 0 shots).
OVERRIDES: dict[str, dict] = {
    "arc_easy": {"training_split": None, "validation_split": None},
    "hellaswag": {"training_split": None},
    "wikitext": {"training_split": None, "validation_split": None},
}


def data_files(task: str) -> dict[str, str]:
    return {split: str(DATA / rel) for split, rel in CASES[task][1].items()}


def golden_path(dtype: str) -> pathlib.Path:
    return GOLDEN / f"lm_eval_hf_{dtype}.json"


def model_path() -> str | None:
    """The cached SmolLM2 GGUF (fetched by `.ci/run` or `jaxeval demo`), or None."""
    from jaxeval.demo.fetch import smollm2_path

    return smollm2_path()


def model_args(path: str, dtype: str) -> str:
    return f"pretrained={os.path.dirname(path)},gguf_file={os.path.basename(path)},dtype={dtype}"


def run_jaxeval(key: str, dtype: str = "float32") -> tuple[dict, list]:
    """(metrics, samples) of one case or variant run alone through jaxeval on the cached model."""
    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    task, flags = base_and_flags(key)
    _, _, shots, limit = CASES[task]
    spec = {"task": task, **OVERRIDES[task]} if task in OVERRIDES else task
    res = jaxeval.simple_evaluate(
        model="jax",
        model_args=model_args(model_path(), dtype) + ",mesh=single",  # see test_smollm2_parity
        tasks=[spec],
        num_fewshot=shots,
        limit=limit,
        bootstrap_iters=0,
        log_samples=True,
        task_manager=TaskManager(data_files={task: data_files(task)}),
        **flags,
    )
    return res["results"][task], res["samples"][task]


def compact_samples(samples: list[dict]) -> list[dict]:
    """What the comparison needs from a samples list: doc id, request arguments, raw answers."""
    out = []
    for s in samples:
        args = [list(a.args) if hasattr(a, "args") else list(a) for a in s["arguments"]]
        out.append(
            {"doc_id": s["doc_id"], "arguments": args, "resps": s["resps"], "filter": s["filter"]}
        )
    return out


def torch_loglikelihood(
    model, ctx: list[int], cont: list[int], max_length: int | None = None
) -> float:
    """lm-eval HFLM's arithmetic for one request on a transformers model: the last
    `max_length + 1` tokens, log_softmax in the model's dtype, gather, torch `.sum()`."""
    import torch

    inp = (ctx + cont)[-(max_length + 1) :][:-1] if max_length else (ctx + cont)[:-1]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([inp])).logits[0], -1)
    pos = torch.arange(len(inp) - len(cont), len(inp))
    return float(logp[pos, torch.tensor(cont)].sum())


def float64_reference(path: str):
    """transformers' Llama in float64 holding the file's dequantized weights.

    (transformers' own GGUF path keeps the weights quantized and runs every matmul in float32 even
    when asked for float64, so it cannot serve as the reference. The dequantized tensors are the
    ones it computes with: tests/e2e/test_smollm2_parity.py checks they are bit-identical.)
    """
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from jaxeval.models.weights.gguf import GGUFCheckpoint, load_config
    from jaxeval.models.weights.gguf_file import GGUFFile

    f = GGUFFile(path)
    config = load_config(f)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64).eval()
    reader = GGUFCheckpoint(f, config)
    state = {}
    for key in model.state_dict():
        name = "model.embed_tokens.weight" if key == "lm_head.weight" else key
        state[key] = torch.from_numpy(reader.read(name).astype(np.float64))
    model.load_state_dict(state)
    return model

"""Shared helpers for the generation tests: tiny checkpoints, the transformers and lm-eval oracles."""

from __future__ import annotations

import functools
import json
import logging
import os

MAX_LENGTH = 64  # lm-eval max_length: prompts are left-truncated to MAX_LENGTH - MAX_GEN tokens
MAX_GEN = 16
PROMPTS = (
    "The quick brown fox jumps over the lazy dog. " * 6,  # longer than 48 tokens: left-truncated
    "Question: What is the capital of France?\nAnswer:",
    "In 1969, Neil",
    "A",
)


def set_generation_eos(path: str, eos_ids: list[int]) -> None:
    """Rewrites the checkpoint's generation_config.json so that HF generate stops on `eos_ids`."""
    file = os.path.join(path, "generation_config.json")
    with open(file) as f:
        cfg = json.load(f)
    cfg["eos_token_id"] = eos_ids
    cfg["_from_model_config"] = False
    with open(file, "w") as f:
        json.dump(cfg, f)


def hf_greedy(path: str, prompt_ids: list[list[int]], max_new: int, pad_id: int) -> list[list[int]]:
    """transformers `generate(do_sample=False)` on a left-padded batch; tokens up to the first EOS."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    width = max(len(p) for p in prompt_ids)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompt_ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=max_new,
            pad_token_id=pad_id,
        )
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    rows = []
    for row in out[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        rows.append(row[:cut])
    return rows


@functools.cache
def lm_eval_hf(path: str, max_length: int = MAX_LENGTH, batch_size: int = 4):
    """lm-eval 0.4.13's HF backend (float32, CPU): the reference implementation."""
    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    hf = HFLM(
        pretrained=path,
        dtype="float32",
        device="cpu",
        batch_size=batch_size,
        max_length=max_length,
    )
    # transformers' Qwen2 tokenizer class adds "<|endoftext|>" (id 512) as pad to the tiny 512-token
    # vocabulary, past the embedding table; padding is masked, so any in-range id gives the same text.
    if hf.tokenizer.pad_token_id >= hf.model.config.vocab_size:
        hf.tokenizer.pad_token_id = hf.tokenizer.eos_token_id
    return hf


def lm_eval_generate(path: str, requests: list[tuple[str, dict]]) -> list[str]:
    from lm_eval.api.instance import Instance

    hf = lm_eval_hf(path)
    insts = [Instance("generate_until", {}, (c, dict(k)), i) for i, (c, k) in enumerate(requests)]
    return hf.generate_until(insts, disable_tqdm=True)


def spanning_stop(tokenizer, tokens: list[int], start: int = 2) -> str | None:
    """A 2-character string of the decoded `tokens` that straddles a token boundary."""
    full = tokenizer.decode(tokens, skip_special_tokens=True)
    for k in range(start, len(tokens) - 1):
        left = tokenizer.decode(tokens[:k], skip_special_tokens=True)
        if not full.startswith(left) or len(left) < 1 or len(full) < len(left) + 1:
            continue
        stop = full[len(left) - 1 : len(left) + 1]
        if len(stop) == 2 and "\ufffd" not in stop and stop.strip():
            return stop
    return None

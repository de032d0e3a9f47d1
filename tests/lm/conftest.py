"""Shared fixtures for the JaxLM tests: tiny checkpoints, real-data workloads, lm-eval as the oracle."""

from __future__ import annotations

import functools
import logging

import pytest

from tests.lm import workloads

MAX_LENGTH = (
    128  # small, so that long ARC/HellaSwag prompts get truncated and pages need many windows
)


@pytest.fixture(scope="session")
def workload(data_root) -> dict[str, list[tuple]]:
    """Per task: (ctx, cont) pairs, or (text,) for rolling."""
    return {
        "arc_easy": workloads.arc_easy(data_root, 6),
        "hellaswag": workloads.hellaswag(data_root, 3),
        "lambada": workloads.lambada(data_root, 8),
        "mmlu": workloads.mmlu(data_root, 3),
        "wikitext": workloads.wikitext_pages(data_root, 3),
    }


@functools.cache
def hf_oracle(path: str, max_length: int = MAX_LENGTH):
    """lm-eval 0.4.13's HF backend on a checkpoint (float32, CPU): the reference implementation."""
    from lm_eval.models.huggingface import HFLM

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    return HFLM(pretrained=path, dtype="float32", device="cpu", batch_size=8, max_length=max_length)


def lm_eval_instances(kind: str, args: list[tuple]):
    from lm_eval.api.instance import Instance

    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def our_instances(kind: str, args: list[tuple]):
    from jaxeval.api.instance import Instance

    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def greedy_requests(hf, contexts: list[str], n_tokens: int = 3) -> list[tuple[str, str]]:
    """(ctx, cont) whose continuation is the HF model's own greedy continuation, decoded to text."""
    import torch

    out = []
    for ctx in contexts:
        ids = hf.tok_encode(ctx)[-(hf.max_length - n_tokens) :]
        x = torch.tensor([ids])
        with torch.no_grad():
            for _ in range(n_tokens):
                nxt = hf.model(x).logits[0, -1].argmax()
                x = torch.cat([x, nxt.view(1, 1)], dim=1)
        out.append((ctx, hf.tokenizer.decode(x[0, len(ids) :].tolist())))
    return out

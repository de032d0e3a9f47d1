"""A tiny Flax nnx Llama (examples/nnx_llama.py), its tokenizer, and its weights written as a Hugging
Face checkpoint: the in-memory path and the checkpoint path on the same weights."""

from __future__ import annotations

import pytest

from jaxeval.demo.tiny import train_tokenizer
from tests.helpers.tiny_models import TEXT

MAX_LENGTH = 128


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> str:
    return train_tokenizer(TEXT, str(tmp_path_factory.mktemp("inmemory_tok")), vocab_size=384)


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="session")
def nnx_model(tokenizer):
    """Weights N(0, 0.2): logits far from uniform, so greedy answers and ties are meaningful."""
    from flax import nnx

    from examples.nnx_llama import LlamaConfig, NnxLlama, init_weights

    cfg = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_LENGTH)
    weights = init_weights(cfg, seed=0, std=0.2)
    return NnxLlama(cfg, rngs=nnx.Rngs(0), weights=weights)


@pytest.fixture(scope="session")
def checkpoint(nnx_model, tokenizer_dir, tmp_path_factory) -> str:
    from examples.nnx_llama import save_hf_checkpoint

    out = str(tmp_path_factory.mktemp("inmemory_ckpt"))
    return save_hf_checkpoint(nnx_model.weights(), nnx_model.cfg, out, tokenizer_dir)

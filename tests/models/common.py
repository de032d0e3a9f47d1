"""Jitted helpers and the parity metric shared by the model tests."""

from __future__ import annotations

import functools

import jax
import numpy as np

from jaxeval.models.runtime import REFERENCE


@functools.partial(jax.jit, static_argnums=0)
def logits_fn(spec, params, tokens, positions, segment, parent):
    """head(hidden(...)) for packed rows: [B, T, V]."""
    return spec.head(params, spec.hidden(params, tokens, positions, segment, parent))


def full_rows(tokens: np.ndarray):
    """positions/segment/parent for unpacked rows without padding."""
    b, t = tokens.shape
    positions = np.tile(np.arange(t, dtype=np.int32), (b, 1))
    return positions, np.ones((b, t), np.int32), np.zeros((b, t), np.int32)


def assert_logits_close(actual, expected, what: str = ""):
    """The parity metric: |a - e| <= 1e-5 * |e| + 1e-5 * max|e| elementwise."""
    expected = np.asarray(expected)
    np.testing.assert_allclose(
        np.asarray(actual),
        expected,
        rtol=1e-5,
        atol=1e-5 * float(np.abs(expected).max()),
        err_msg=what,
    )


def torch_logits(torch_model, tokens: np.ndarray) -> np.ndarray:
    """transformers' float32 logits for unpadded rows [B, T] -> [B, T, V]."""
    import torch

    with torch.no_grad():
        return torch_model(torch.as_tensor(np.asarray(tokens), dtype=torch.long)).logits.numpy()


@functools.partial(jax.jit, static_argnums=0, static_argnames="runtime")
def cached_step(spec, params, cache, tokens, positions, valid, index, *, runtime=REFERENCE):
    """forward_cached + head at the last position: (next-token logits [B, V], cache)."""
    h, cache = spec.forward_cached(params, cache, tokens, positions, valid, index, runtime=runtime)
    return spec.head(params, h[:, -1]), cache


def greedy_generate(spec, params, prompts: list[list[int]], new_tokens: int) -> np.ndarray:
    """Left-padded batch greedy decoding with the KV cache: prefill once, then T = 1 steps."""
    b, p = len(prompts), max(len(x) for x in prompts)
    tokens = np.zeros((b, p), np.int32)
    valid = np.zeros((b, p), bool)
    for i, prompt in enumerate(prompts):
        tokens[i, p - len(prompt) :] = prompt
        valid[i, p - len(prompt) :] = True
    positions = np.clip(np.cumsum(valid, axis=1) - 1, 0, None).astype(np.int32)
    cache = spec.init_cache(b, p + new_tokens, "float32")
    logits, cache = cached_step(spec, params, cache, tokens, positions, valid, np.int32(0))
    last = positions[:, -1]
    out = []
    for step in range(new_tokens):
        nxt = np.asarray(logits).argmax(-1).astype(np.int32)
        out.append(nxt)
        if step == new_tokens - 1:
            break
        last = last + 1
        logits, cache = cached_step(
            spec,
            params,
            cache,
            nxt[:, None],
            last[:, None],
            np.ones((b, 1), bool),
            np.int32(p + step),
        )
    return np.stack(out, axis=1)


def torch_generate(
    torch_model, prompts: list[list[int]], new_tokens: int, pad_id: int
) -> np.ndarray:
    """transformers' greedy `generate` on the same left-padded batch (EOS never stops it)."""
    import torch

    b, p = len(prompts), max(len(x) for x in prompts)
    ids = torch.full((b, p), pad_id, dtype=torch.long)
    mask = torch.zeros((b, p), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, p - len(prompt) :] = torch.tensor(prompt)
        mask[i, p - len(prompt) :] = 1
    torch_model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = torch_model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=0,
            pad_token_id=pad_id,
        )
    return out[:, p:].numpy()

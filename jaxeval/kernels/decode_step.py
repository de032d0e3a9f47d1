"""One decode step: the next-token logits of every row, the KV cache updated in place.

    decode_step(params, cache, tokens, positions, index, *, model, runtime) -> (logits [B, V], cache)

A thin kernel over the model's public cached forward, `model.forward_cached`, which writes the new
keys/values into the stacked cache inside its layer scan (in place on the loop-carried buffer, no
per-step copy of [L, B, C, G, E]) and attends only over the written slots [0, index + 1). See
`jaxeval.models.decoder.forward_cached`. Every row feeds one token at the shared slot `index`:

    step i of a batch with prompts padded to P:  tokens = last picked token [B],
    positions = prompt_len + i - 1 [B], index = P + i - 1
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jaxeval.models.contract import DecoderModel, KVCache
from jaxeval.models.runtime import REFERENCE, Runtime
from jaxeval.shapes import Float, Int

IntB = Int["B"]  # a lone letter in a string reads as an undefined name to linters


def decode_step(
    params: Any,
    cache: KVCache,
    tokens: IntB,
    positions: IntB,
    index: Int[""],
    *,
    model: DecoderModel,
    runtime: Runtime = REFERENCE,
) -> tuple[Float["B V"], KVCache]:
    """Feeds one token per row at cache slot `index`; returns its next-token logits and the cache."""
    ones = jnp.ones((tokens.shape[0], 1), bool)
    h, cache = model.forward_cached(
        params, cache, tokens[:, None], positions[:, None], ones, index, runtime=runtime
    )
    return model.head(params, h[:, 0]), cache

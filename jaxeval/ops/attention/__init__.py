"""Attention's device kernels and the rule they share.

    mask            `Mask` (segment, parent, positions, window: one pytree per packed call), the
                    rule's dense forms and block summaries, `MASKED`, `NO_WINDOW`, `State`
    tpu_packed      Pallas TPU: packed rows with block skipping
    tpu_decode      Pallas TPU: a decode step over each row's written cache slots, and its cache
                    write one slot per row (`write_row_slots`)
    gpu             `jax.nn.dot_product_attention` (cuDNN on NVIDIA GPUs) under the packed mask
    cpu             XLA FFI custom calls for XLA:CPU, built on first use from `cpu_attention.cc`

Every kernel computes the reference's numbers (`jaxeval.models.attention`) up to float32 summation
order; the backends there choose when each applies. The package itself imports only `mask`; the
Pallas modules are imported by the `tpu` backend when a TPU model first traces.
"""

from jaxeval.ops.attention.mask import (
    MASKED,
    NO_WINDOW,
    Mask,
    State,
    block_visibility,
    cache_mask,
    packed_mask,
    window_mask,
)

__all__ = [
    "MASKED",
    "NO_WINDOW",
    "Mask",
    "State",
    "block_visibility",
    "cache_mask",
    "packed_mask",
    "window_mask",
]

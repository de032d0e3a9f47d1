"""Attention: the reference math, the backend seam, one backend per platform, and the choice.

    reference   grouped-query attention computed by XLA's own ops: `attend` (dense scores),
                `blocked_attend` (packed rows block by block, online softmax), `cache_state` and
                `cache_attend` (over the KV cache), `write_slots` (the cache write). It knows no
                backend.
    block       `attention_block`: a layer's projections, q/k norms and rotary around the attention
    backend     `AttentionBackend`, the Protocol every backend implements, every method total
    xla         `XlaAttention` (`XLA`): the reference, any platform
    cpu         `CpuAttention` (`CPU`): the fused C++ custom calls of `jaxeval.ops.attention.cpu`
    tpu         `TpuAttention`: the Pallas kernels of `jaxeval.ops.attention.tpu_packed` and
                `tpu_decode`, under `jax.shard_map` on a mesh
    gpu         `GpuAttention`: cuDNN through `jax.nn.dot_product_attention` (`ops.attention.gpu`)
    choice      `select_attention(mesh, setting)`: `--model_args attention=`, `JAXEVAL_ATTENTION`

The rule every path computes, `Mask` (segment, parent, positions, window), and the constants the
device kernels share with the reference (`MASKED`, `NO_WINDOW`) live one layer down, in
`jaxeval.ops.attention.mask`, and are named here too.
"""

from jaxeval.models.attention.backend import AttentionBackend
from jaxeval.models.attention.block import AttendFn, attention_block
from jaxeval.models.attention.choice import ENV, SETTINGS, requested, select_attention
from jaxeval.models.attention.cpu import CPU, CpuAttention
from jaxeval.models.attention.gpu import GpuAttention
from jaxeval.models.attention.reference import (
    attend,
    attend_new_keys,
    blocked_attend,
    cache_attend,
    cache_state,
    fold_sinks,
    new_keys,
    online_init,
    write_slots,
)
from jaxeval.models.attention.tpu import TpuAttention
from jaxeval.models.attention.xla import XLA, XlaAttention
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
    "CPU",
    "ENV",
    "MASKED",
    "NO_WINDOW",
    "SETTINGS",
    "XLA",
    "AttendFn",
    "AttentionBackend",
    "CpuAttention",
    "GpuAttention",
    "Mask",
    "State",
    "TpuAttention",
    "XlaAttention",
    "attend",
    "attend_new_keys",
    "attention_block",
    "block_visibility",
    "blocked_attend",
    "cache_attend",
    "cache_mask",
    "cache_state",
    "fold_sinks",
    "new_keys",
    "online_init",
    "packed_mask",
    "requested",
    "select_attention",
    "window_mask",
    "write_slots",
]

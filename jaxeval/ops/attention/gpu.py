"""Packed-row attention through `jax.nn.dot_product_attention`: cuDNN's fused flash attention on
NVIDIA GPUs, XLA's dense path elsewhere, under the exact rule of `mask.py`.

cuDNN knows causal masks, padding lengths, index windows and an additive bias, but no segment ids
with a parent link and no window on positions. So the whole rule goes in as a boolean mask
[B, 1, T, J] (`mask.packed_mask`, & `mask.window_mask` on sliding-window layers), which
`dot_product_attention` turns into a bias of 0 or a large negative number in the operands' dtype
(-2**41 in bfloat16), added to the scaled scores. A masked key's weight is then exp(-2**41 - max),
exactly 0 in float32 whenever the query sees any key: the rule, not an approximation of it.
`is_causal=True` goes with it (our rule is causal), so cuDNN also skips the upper triangle. Two
requests and a context c with children x and y in a row of T = 8 (`#` = seen, `.` = masked):

    segment   1  1  2  2  3  4  4  0       query 4 (x0) sees 2, 3 (c) and 4
    parent    0  0  0  0  2  2  2  0       query 6 (y1) sees 2, 3 (c), 5 and 6
    query 4   .  .  #  #  #  .  .  .       query 7 (padding) sees nothing: its output, never read,
    query 6   .  .  #  #  .  #  #  .       is finite but differs from the reference's

What fits (`fits`), and why:

    soft-cap (Gemma-2)      no: the bias is added after the scores, a tanh cannot be
    init (a cache's state)  no: the kernel starts from no keys and returns no online state
    v's head dim != q's     no: `dot_product_attention` takes one head dim (MLA's differ)
    H % G != 0              no: query heads must group evenly over the kv heads
    platform gpu/cuda       bfloat16 or float16 operands, E a multiple of 8, E <= 128
                            (<= 256 from Hopper on): cuDNN's limits in jax 0.10
    other platforms         any float dtype: XLA's dense path (materializes [B, H, T, J] scores)

Anything else the `gpu` backend (`jaxeval.models.attention.GpuAttention`) hands to the reference,
`blocked_attend`. The scale: XLA multiplies the float32 scores by it after the matmul, as the
reference does; cuDNN takes it as a compile-time constant, while ours is traced (one per layer,
scanned), so on cuDNN it is folded into the queries first (q * scale in float32, rounded to q's
dtype). The mask costs B*T*J bias values, which cuDNN
reads block by block; no [B, H, T, J] scores exist on that path.

Dimension names: `jaxeval.shapes`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxeval.ops.attention.mask import Mask, packed_mask, window_mask
from jaxeval.shapes import Float

GPU_PLATFORMS = ("gpu", "cuda")
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def _max_head_dim() -> int:
    """cuDNN's largest head dim: 256 from Hopper (compute capability 9.0) on, else 128."""
    try:
        capability = jax.devices("gpu")[0].compute_capability
        return 256 if tuple(int(x) for x in capability.split(".")) >= (9, 0) else 128
    except (RuntimeError, AttributeError, ValueError):  # no GPU visible: the safe limit
        return 128


def fits(q, k, *, softcap, init, platform: str, v=None) -> bool:
    """Whether `gpu_packed` applies on `platform` to these operands (module docstring's table);
    False means the reference (`blocked_attend`)."""
    if softcap is not None or init is not None:
        return False
    e = q.shape[-1]
    if k.shape[-1] != e or (v is not None and v.shape[-1] != e) or q.shape[2] % k.shape[2]:
        return False
    if platform.lower() not in GPU_PLATFORMS:
        return bool(jnp.issubdtype(q.dtype, jnp.floating))
    return bool(q.dtype in CUDNN_DTYPES and e % 8 == 0 and e <= _max_head_dim())


def implementation_for(implementation: str | None) -> str:
    """`dot_product_attention`'s implementation: the one given, else cuDNN when JAX's default
    backend is a GPU (jax 0.10's None means XLA there too), else XLA."""
    if implementation is not None:
        return implementation
    return "cudnn" if jax.default_backend() in GPU_PLATFORMS else "xla"


def packed_allowed(mask: Mask) -> jax.Array:
    """The rule of `mask.py` as a boolean mask [B, 1, T, T] (one for every head)."""
    allowed = packed_mask(mask.segment, mask.parent)  # [B, T, T]: query, key
    if mask.window is not None:
        allowed &= window_mask(mask.positions, mask.positions, mask.window)
    return allowed[:, None]


def fused_attend(
    q: Float["B T H E"],
    k: Float["B J G E"],
    v: Float["B J G E"],
    allowed: jax.Array,
    scale: Float[""],
    *,
    implementation: str,
    fold_scale: bool,
) -> Float["B T H E"]:
    """`dot_product_attention` under the boolean mask `allowed` [B, 1, T, J] (causal included).
    `fold_scale`: multiply the queries by `scale` first and give the call 1.0 (cuDNN's scale is a
    compile-time constant); else the call scales the float32 scores (XLA's path takes a traced
    scale, the reference's order)."""
    if fold_scale:
        q = (q.astype(jnp.float32) * scale.astype(jnp.float32)).astype(q.dtype)
        scale = 1.0
    return jax.nn.dot_product_attention(
        q, k, v, mask=allowed, scale=scale, is_causal=True, implementation=implementation
    )


def gpu_packed(
    q: Float["B T H E"],
    k: Float["B T G E"],
    v: Float["B T G E"],
    mask: Mask,
    *,
    scale: Float[""],
    implementation: str | None = None,
) -> Float["B T H E"]:
    """Packed rows under `mask` (the segment/parent/causal rule and the sliding window: None, or a
    traced int32; `mask.NO_WINDOW` = none) through `dot_product_attention`, for operands that
    `fits` (no soft-cap, no earlier state); `scale` a traced float32 scalar. `implementation`:
    "cudnn", "xla", or None = `implementation_for`."""
    how = implementation_for(implementation)
    allowed = packed_allowed(mask)
    scale = jnp.asarray(scale, jnp.float32)
    return fused_attend(q, k, v, allowed, scale, implementation=how, fold_scale=how == "cudnn")

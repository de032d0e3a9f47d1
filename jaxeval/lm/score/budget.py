"""The scoring token budget: how many tokens one scoring batch holds, from the model's width and
the memory a device has left.

    auto_token_budget(spec, mesh, max_length, max_batch_size)   # a run's default, this device
    run_token_budget(spec, free_bytes, shards, max_length, max_batch_size)   # ... on given memory
    token_budget_for(spec, free_bytes, shards, max_length, max_batch_size)   # the same rule for a
        device with `free_bytes` free: `jaxeval plan --topology` applies it to a TPU chip's HBM
        left after the parameters, so the plan compiles the buckets the run would

One rule for the run and the plan. The bucket grid a budget gives is `buckets.fitted_buckets`.
"""

from __future__ import annotations

import os
from typing import Any

import jax

from jaxeval.platform import distributed
from jaxeval.platform.mesh import batch_shards, local_device
from jaxeval.shapes import pow2_at_most

DEFAULT_CPU_TOKEN_BUDGET = 8192
_MIN_AUTO_BUDGET = 1024
_MAX_AUTO_BUDGET = 1 << 20
_ATTENTION_KEYS = 512  # keys per query row held at once (dense rows < 512, blocks of <= 512)


def auto_token_budget(spec: Any, mesh: Any, max_length: int, max_batch_size: int) -> int:
    """A token budget from the model's width and the first device's free memory.

    Per token the layer body keeps roughly 12 D + 3 F activations plus H attention scores per key of
    a block (512 keys: rows of 512 and more attend block by block; float32 estimate, x2 for
    temporaries). On accelerators half the free memory (`memory_stats`) goes to activations; on CPU
    a quarter of the available host memory, and at most 8192 tokens (CPU throughput is flat past a
    few thousand tokens per call). The result is a power of two, at least 1024, at most
    max_batch_size * max_length. With several processes the smallest of their budgets is used, so
    that all of them plan the same batches.
    """
    free = device_free_bytes(mesh)
    shards = batch_shards(mesh) if free is not None else 1
    return run_token_budget(spec, free, shards, max_length, max_batch_size)


def run_token_budget(
    spec: Any, free_bytes: int | None, shards: int, max_length: int, max_batch_size: int
) -> int:
    """A run's budget on devices with `free_bytes` free after the parameters (None: the CPU)
    and `shards` batch shards: `token_budget_for`, the smallest over the run's processes."""
    shards = shards if free_bytes is not None else 1  # the CPU's rule is for the whole host
    return distributed.agree_min(
        token_budget_for(spec, free_bytes, shards, max_length, max_batch_size)
    )


def device_free_bytes(mesh: Any) -> int | None:
    """The first device's free memory (`memory_stats`: limit - in use), None on the CPU."""
    device = local_device(mesh) if mesh is not None else jax.local_devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # CPU backends raise or return None
        stats = None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))


def host_free_bytes() -> int:
    """The host's available memory (8 GiB where the system does not say)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def activation_bytes_per_token(spec: Any, max_length: int) -> int:
    """Bytes one token's layer body keeps at once (`auto_token_budget`'s estimate)."""
    d = getattr(spec, "hidden_size", 4096)
    f = getattr(spec, "intermediate_size", 4 * d)
    h = getattr(spec, "num_heads", 32)
    return 2 * 4 * (12 * d + 3 * f + h * min(max_length, _ATTENTION_KEYS))


def token_budget_for(
    spec: Any, free_bytes: int | None, shards: int, max_length: int, max_batch_size: int
) -> int:
    """`auto_token_budget`'s rule for one device with `free_bytes` free (None: the CPU, whose rule
    reads the host's available memory) and `shards` batch shards."""
    cap = max(max_length, max_batch_size * max_length)
    per_token = activation_bytes_per_token(spec, max_length)
    if free_bytes is None:
        budget = min(DEFAULT_CPU_TOKEN_BUDGET, int(0.25 * host_free_bytes() / per_token))
    else:
        budget = min(_MAX_AUTO_BUDGET, int(0.5 * free_bytes / per_token) * shards)
    budget = pow2_at_most(budget)
    return int(min(cap, max(_MIN_AUTO_BUDGET, budget)))

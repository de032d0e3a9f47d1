"""Logical axes -> mesh axes: THE rule table for parameter sharding, and the helpers that apply it.

Every parameter dimension carries a logical name (see `params.param_layout`); `LOGICAL_AXIS_RULES`
maps each name to a mesh axis (or None = replicated). A dimension whose size is not divisible by its
mesh axis size, or whose mesh axis is absent from the mesh or already used by an earlier dimension
of the same array, falls back to replicated, so tiny models never fail to shard.

    q [L, D, H, E] with axes (layers, embed, heads, head_dim) on mesh {data: 2, fsdp: 1, model: 4}
        -> PartitionSpec(None, "fsdp", "model", None) if H % 4 == 0, else (None, "fsdp", None, None)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxeval.models.contract import KVCache
from jaxeval.models.experts import EXPERT_AXES, expert_axes
from jaxeval.models.params import is_info, param_layout
from jaxeval.platform.mesh import rows_axis

LOGICAL_AXIS_RULES: dict[str, str | None] = {
    "vocab": "model",
    "embed": "fsdp",
    "heads": "model",
    "kv_heads": "model",
    "head_dim": None,
    "mlp": "model",
    # Mixture of Experts: whole experts per device over fsdp and model (expert parallelism,
    # `experts.expert_axes` picks the axes), else each expert's features split over model
    "experts": EXPERT_AXES,
    "expert_mlp": "model",
    "lora": None,  # MLA's latent features: small, each device holds them all
    "layers": None,  # scanned over: never split
    "norm": None,
    "positions": None,
}


def logical_sharding(
    mesh: Mesh, axes: Sequence[str], shape: Sequence[int], rules: dict[str, Any] | None = None
) -> NamedSharding:
    """The NamedSharding for one array with the given logical axes (fallbacks in the docstring)."""
    rules = LOGICAL_AXIS_RULES if rules is None else rules
    used: set[str] = set()
    spec: list[Any] = []
    for name, size in zip(axes, shape):
        if name not in rules:
            raise KeyError(
                f"logical axis {name!r} has no sharding rule; add it to LOGICAL_AXIS_RULES"
            )
        axis = rules[name]
        if isinstance(axis, tuple):  # several mesh axes together (the experts)
            split = expert_axes(mesh, size, tuple(used), axis)
            spec.append(None if not split else split[0] if len(split) == 1 else split)
            used.update(split)
            continue
        ok = (
            axis is not None
            and axis in mesh.shape
            and axis not in used
            and mesh.shape[axis] > 1
            and size % mesh.shape[axis] == 0
        )
        spec.append(axis if ok else None)
        if ok:
            used.add(axis)
    return NamedSharding(mesh, PartitionSpec(*spec))


def split_ways(mesh: Any, logical: str, size: int) -> int:
    """How many pieces the rule table cuts one dimension of `size` along `logical` into on `mesh`
    (a `Mesh` or an `AbstractMesh`): the mesh axis's size, or 1 when it stays whole."""
    return entry_ways(mesh, logical_sharding(mesh, (logical,), (size,)).spec[0])


def entry_ways(mesh: Any, entry: Any) -> int:
    """The devices one PartitionSpec entry (None, an axis name or a tuple of them) splits over."""
    if entry is None:
        return 1
    return math.prod(mesh.shape[a] for a in ((entry,) if isinstance(entry, str) else entry))


def cache_shardings(spec, mesh: Mesh, batch: int, length: int) -> Any:
    """NamedShardings for `spec.init_cache(batch, length)`: rows on the batch axes, kv heads on model.

    k [L, B, G, E, C], v [L, B, G, C, E] -> (None, batch axes, model?, None, None); valid,
    positions [B, C] -> rows.
    """
    rows = rows_axis(mesh, batch)
    heads = logical_sharding(mesh, ("kv_heads",), (spec.cache_heads,)).spec[0]
    kv = NamedSharding(mesh, PartitionSpec(None, rows, heads, None, None))
    slots = NamedSharding(mesh, PartitionSpec(rows, None))
    return KVCache(k=kv, v=kv, valid=slots, positions=slots)


def param_shardings(spec, mesh: Mesh) -> dict[str, Any]:
    """A NamedSharding per parameter leaf, same tree as the parameters."""
    return jax.tree.map(
        lambda i: logical_sharding(mesh, i.axes, i.shape), param_layout(spec), is_leaf=is_info
    )

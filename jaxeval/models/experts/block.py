"""The Mixture-of-Experts feed-forward layer, equal to transformers' sparse MoE blocks.

One layer, per token: a router scores the X experts, the K best are run, and their outputs are
summed weighted by the routing weights; shared experts (always on) are added. Shapes: tokens are
the B*T rows of `x` flattened; Nx experts, Kx experts per token (the top-k), Fx the width of one
expert (`MoESpec.expert_size`), D the model width. One token, Nx = 4, Kx = 2 (`routing` has the
router of each family):

    logits        [1.0, 3.0, 0.5, 2.0]
    experts       [1, 3]    weights [0.731, 0.269]   (softmax, top-k, renormalised)
    output        0.731 * expert_1(x) + 0.269 * expert_3(x)   (+ the shared experts)

The experts run only on the tokens routed to them: the B*T*K assignments are sorted by expert and
each expert's group is one grouped matmul. How the grouped matmuls run is the runtime's `experts`
backend (`select_experts`, chosen once per model like `attention.select_attention`, held by
`jaxeval.models.runtime.Runtime`):

    ragged   `jax.lax.ragged_dot` over the sorted assignments; XLA:TPU runs it natively
    blocked  each expert's group padded to a multiple of a block of m rows; a loop over the used
             blocks only (dynamic trip count) runs one expert's whole MLP per block. The choice
             off TPU: XLA:CPU and GPU expand `ragged_dot` into every expert on every sorted
             assignment, X times the FLOPs (tests/models/test_moe.py has the numbers)
    dense    every expert on every token (X/K times the FLOPs), the reference of the tests

On a mesh of several devices the backend runs under expert parallelism (`parallel`): the expert
weights split on the experts dimension, each device runs its own experts on every token routed
to them; the routing is unchanged.

Combination (HF's default `grouped_mm` experts): each expert's output in x's dtype times its
weight (in the weight's dtype: float32 or x's), summed over the K in float32, cast to x's dtype,
then the shared experts' output (x's dtype) added.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh

from jaxeval.models.experts.backend import ExpertBackend
from jaxeval.models.experts.choice import BLOCKED
from jaxeval.models.experts.routing import route, router_logits
from jaxeval.models.experts.spec import MoESpec
from jaxeval.models.layers import dense, mlp
from jaxeval.shapes import Float


def moe_block(
    p: dict[str, Any],
    x: Float["B T D"],
    *,
    moe: MoESpec,
    backend: ExpertBackend = BLOCKED,
    mesh: Mesh | None = None,
) -> Float["B T D"]:
    """The MoE feed-forward layer (module docstring) on `x`, in x's dtype; `p` one layer's
    parameters (`moe_param_layout` without the L axis); `backend` runs the grouped matmuls
    (the runtime's `experts`) on `mesh` (the runtime's)."""
    b, t, d = x.shape
    h = x.reshape(b * t, d)
    weights, experts = route(router_logits(p, h, moe=moe), p, moe)
    if moe.weight_dtype == "hidden":
        weights = weights.astype(x.dtype)
    out = backend.combine(p, h, experts, weights, moe=moe, mesh=mesh)
    out = out.astype(x.dtype).reshape(b, t, d)
    if moe.shared_size:
        shared = mlp(p["shared"], x, kind="gated", activation=moe.activation)
        if moe.shared_gate:
            shared = jax.nn.sigmoid(dense(x, p["shared_gate"], "btd,do->bto")) * shared
        out = out + shared
    return out

"""`ExpertBackend`: the one seam between the MoE layer and the way its experts run.

The layer (`block.moe_block`) routes each token to its K experts and hands the assignments to a
backend (`Runtime.experts`, chosen once per model by `select_experts`), which answers one call:

    combine(p, x, experts, weights, *, moe, acc, mesh)
                    sum over the K of weight * expert(x), float32, one row per token, added onto
                    `acc` when given (the ring of `ExpertParallel` carries its sums through it)

`mesh` is the devices the rows and the expert weights are spread over (the runtime's, the mesh's
one home; None: one device's arrays): `ExpertParallel` runs each device's experts over it, the
other backends ignore it. No backend holds a mesh of its own.

`p` holds one layer's parameters; its stacked expert weights ([Nx, ...], `spec.EXPERT_KEYS`) may
hold every expert or, on a device under expert parallelism, X/n of them: assignments to experts
held elsewhere carry the id X/n ("not here") and contribute zero. Every backend computes the
reference's numbers (`reference.DenseExperts`) up to the order of the float32 sum over the K.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from jax.sharding import Mesh

from jaxeval.models.experts.spec import MoESpec
from jaxeval.shapes import Float, Int


@runtime_checkable
class ExpertBackend(Protocol):
    """How an MoE layer's experts run on their tokens (module docstring). Frozen and hashable: a
    field of the static `Runtime`, so part of every executable's key."""

    name: str  # what `model_info()` reports: "dense", "ragged" or "blocked"

    def combine(
        self,
        p: dict[str, Any],
        x: Float["B*T D"],
        experts: Int["B*T Kx"],
        weights: Float["B*T Kx"],
        *,
        moe: MoESpec,
        acc: Float["B*T D"] | None = None,
        mesh: Mesh | None = None,
    ) -> Float["B*T D"]:
        """sum_k weights[:, k] * expert_{experts[:, k]}(x) in float32, plus `acc` when given."""
        ...

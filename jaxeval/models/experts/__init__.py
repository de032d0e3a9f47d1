"""Mixture of Experts: the spec, the routing, the layer, the backend seam, the backends, the choice.

    spec        `MoESpec`, one MoE layer's static configuration, and `moe_param_layout`, its
                parameters stacked over the layers
    routing     `router_logits` and `route`: each token's K experts and weights, per family as
                transformers' routers compute them
    block       `moe_block`: the feed-forward layer (routing, the experts, the shared experts)
    backend     `ExpertBackend`, the Protocol every backend implements (`combine`)
    reference   `DenseExperts` (`DENSE`): every expert on every token; `expert_mlp`, the expert
                math every backend shares
    ragged      `RaggedExperts` (`RAGGED`): `jax.lax.ragged_dot` over the assignments sorted by
                expert, native on XLA:TPU (`ragged_matmul`)
    blocked     `BlockedExperts` (`BLOCKED`): each expert's group in blocks of m rows, a loop over
                the used blocks (CPU, GPU)
    parallel    `ExpertParallel`: a backend under `shard_map`, each device of a mesh running its
                X/n experts (`expert_axes`, `EXPERT_AXES`: the axes the experts dimension splits
                over, which `jaxeval.models.sharding` also applies to the parameters)
    choice      `select_experts(mesh, setting)`: `--model_args experts=`, `JAXEVAL_MOE`

The decoder calls `moe_block` with the runtime's backend (`Runtime.experts`); the family table
fills a `MoESpec` from a checkpoint's config (`jaxeval.models.families.routing`).
"""

from jaxeval.models.experts.backend import ExpertBackend
from jaxeval.models.experts.block import moe_block
from jaxeval.models.experts.blocked import BlockedExperts
from jaxeval.models.experts.choice import BLOCKED, DENSE, ENV, RAGGED, SETTINGS, select_experts
from jaxeval.models.experts.parallel import EXPERT_AXES, ExpertParallel, expert_axes, local_ids
from jaxeval.models.experts.ragged import RaggedExperts, ragged_matmul
from jaxeval.models.experts.reference import DenseExperts, expert_mlp
from jaxeval.models.experts.routing import route, router_logits
from jaxeval.models.experts.spec import EXPERT_KEYS, GPT_OSS, MoESpec, moe_param_layout

__all__ = [
    "BLOCKED",
    "DENSE",
    "ENV",
    "EXPERT_AXES",
    "EXPERT_KEYS",
    "GPT_OSS",
    "RAGGED",
    "SETTINGS",
    "BlockedExperts",
    "DenseExperts",
    "ExpertBackend",
    "ExpertParallel",
    "MoESpec",
    "RaggedExperts",
    "expert_axes",
    "expert_mlp",
    "local_ids",
    "moe_block",
    "moe_param_layout",
    "ragged_matmul",
    "route",
    "router_logits",
    "select_experts",
]

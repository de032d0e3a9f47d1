"""`Runtime`: how a model runs on its devices, beside the `ModelSpec` that says what the model is.

    runtime = make_runtime(mesh, attention=None, experts=None)   # once per model (JaxLM does)
    h = spec.hidden(params, tokens, positions, segment, parent, runtime=runtime)
    score(params, batch, model=spec, runtime=runtime, n_slots=S)  # one static argument

A `ModelSpec` holds what config.json says (widths, norms, rope, experts' routing); a `Runtime`
holds everything else that changes the compiled program: the mesh, the attention and expert
backends chosen for its platform, and the planner's counting flag. Both are frozen and hashable,
so both are static arguments of every kernel and part of every executable's key, and nothing is
read from the environment while a function is traced.

    mesh           the devices the parameters live on (None: JAX's default device). On a mesh of
                   several devices every layer's hidden states keep their rows on the batch axes
                   (`rows_mesh`): without it the partitioner may follow the fsdp-sharded weights
                   and split the activations over the contraction instead (compiled for a v5e-8,
                   Llama-3-8B's scoring all-reduced each MLP product, 7.5 GB per layer per chip,
                   where gathering the layer's weights moves 0.4 GB)
    attention      the attention backend (`jaxeval.models.attention.select_attention`)
    experts        a Mixture of Experts' grouped-matmul backend (`experts.select_experts`)
    unroll_layers  the layer scans unrolled into straight-line code: only for counting a few
                   layers' FLOPs exactly (`jaxeval.plan`; XLA's cost analysis counts a loop's
                   body once)

The mesh has this one home: no backend holds one. The decoder hands it to each backend call that
may shard (`mesh=runtime.rows_mesh`: the TPU kernels' `shard_map`, expert parallelism); a
device's share of a split call gets none.

`REFERENCE` (no mesh, XLA's attention loops, the blocked experts) is what a call without a runtime
gets: the tests' reference and a model traced outside any run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jax.sharding import Mesh

from jaxeval.models.attention import XLA, AttentionBackend, select_attention
from jaxeval.models.attention.sequence import sequence_split
from jaxeval.models.attention.slots import slots_split
from jaxeval.models.experts import BLOCKED, ExpertBackend, select_experts


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    """The mesh, the backends and the counting flag one model's executables are compiled with."""

    mesh: Mesh | None = None
    attention: AttentionBackend = XLA
    experts: ExpertBackend = BLOCKED
    unroll_layers: bool = False

    @property
    def rows_mesh(self) -> Mesh | None:
        """The mesh whose batch axes hidden states keep their rows on: None on one device."""
        if self.mesh is None or self.mesh.devices.size == 1:
            return None
        return self.mesh

    def prompt_split(self, *, rows: int, length: int) -> Any:
        """How `rows` prompts of `length` tokens prefilled together split their tokens over the
        batch devices (`models.attention.sequence.Split`), or None: their rows split, or no
        split applies."""
        block = self.attention.block_size(length)
        return sequence_split(self.rows_mesh, rows=rows, length=length, block=block)

    def slots_split(self, *, rows: int, slots: int) -> Any:
        """How an engine cache of `rows` rows x `slots` slots splits its slots over the batch
        devices (`models.attention.slots.SlotSplit`), or None: its rows split, or one device."""
        return slots_split(self.rows_mesh, rows=rows, slots=slots)


REFERENCE = Runtime()


def make_runtime(
    mesh: Mesh | None, attention: str | None = None, experts: str | None = None
) -> Runtime:
    """The runtime of a model on `mesh`: the attention backend (`select_attention`) and the expert
    backend (`select_experts`) for its platform; the settings None read the environment
    (`JAXEVAL_ATTENTION`, `JAXEVAL_MOE`), else `auto`."""
    return Runtime(
        mesh=mesh,
        attention=select_attention(mesh, attention),
        experts=select_experts(mesh, experts),
    )

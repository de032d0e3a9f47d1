"""What a run compiles, as the planner compiles it for a TPU slice: the `Scorer`'s bucket
executables and the continuous engine's admission (prefill) and decode chunk, each a `Planned`
whose `build(spec, runtime, params)` gives the owner's own `Job` for any layer count, with the
model FLOPs each is worth.

    useful    model FLOPs: 2 x (active, non-embedding) parameters per token, the LM head over the
              score points only, and causal attention (each query over the keys before it,
              within its window)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.kernels.generate import StopTable
from jaxeval.lm.executables import Executables, Job
from jaxeval.lm.generate.calls import EngineKey
from jaxeval.lm.generate.engine import ContinuousEngine, EngineTarget, engine_job
from jaxeval.lm.generate.plan import prefill_bucket
from jaxeval.lm.generate.sizing import ADMIT_TOKENS
from jaxeval.lm.generate.stops import BUFFER_BYTES
from jaxeval.lm.score.buckets import Bucket, BucketSet
from jaxeval.lm.score.scorer import Scorer
from jaxeval.models.attention import NO_WINDOW
from jaxeval.plan.topology import Topology, topology_devices
from jaxeval.platform.mesh import make_mesh, replicated
from jaxeval.shapes import pow2_at_most


def _layer_windows(spec: Any) -> list[int]:
    """Per layer, its sliding window (0: global)."""
    return [int(w) if w and w < NO_WINDOW else 0 for w in spec.sliding_window]


def attention_flops(spec: Any, queries: int, keys_before: int) -> float:
    """q.k and weights.v FLOPs of `queries` consecutive queries after `keys_before` keys, each
    attending causally to every earlier key (and itself) within its layer's window."""
    per_key = 4 * spec.num_heads * spec.head_dim
    total = 0.0
    for w in _layer_windows(spec):
        for_layer = 0.0
        first, last = keys_before + 1, keys_before + queries  # keys seen by the first, last query
        if not w or w >= last:
            for_layer = (first + last) * queries / 2
        else:
            ks = np.minimum(np.arange(first, last + 1, dtype=np.float64), w)
            for_layer = float(ks.sum())
        total += per_key * for_layer
    return total


def score_useful_flops(spec: Any, bucket: Bucket) -> float:
    """A full bucket (every row one request of T tokens, K score points): body, head over the
    points, causal attention; all chips."""
    body = 2 * spec.body_param_count(active=True) * bucket.rows * bucket.length
    head = 2 * spec.hidden_size * spec.vocab_size * bucket.rows * bucket.points
    return body + head + bucket.rows * attention_flops(spec, bucket.length, 0)


def decode_useful_flops(spec: Any, rows: int, context: int) -> float:
    """One decode step of `rows` rows at `context` cached tokens each; all chips."""
    return rows * (
        2 * spec.body_param_count(active=True) + 2 * spec.hidden_size * spec.vocab_size
    ) + rows * attention_flops(spec, 1, context)


def topology_mesh(topo: Topology, preset: str = "fsdp", **sizes: int) -> Mesh:
    """A (data, fsdp, model) mesh of a preset of configs/meshes.yaml on the slice's devices
    (`platform.mesh.make_mesh`, as a run builds its mesh)."""
    return make_mesh(preset, devices=topology_devices(topo.name), **sizes)


def param_bytes_per_chip(params: Any) -> int:
    total = 0
    for x in jax.tree.leaves(params):
        shard = x.sharding.shard_shape(x.shape)
        total += int(np.prod(shard)) * np.dtype(x.dtype).itemsize
    return total


def score_buckets(grid: Any, lengths: list[int]) -> list[Bucket]:
    """Per length (the grid's nearest at or above), the buckets with the fewest and most points;
    where a batch holds one row a device and rows split their tokens over the devices
    (`BucketSet.multiple_at`), also the fewest points' batch of one row (a lone long document:
    its tokens over every chip)."""
    out: list[Bucket] = []
    for want in lengths:
        length = min((b.length for b in grid if b.length >= want), default=grid.max_length)
        at = [b for b in grid if b.length == length]
        fewest = min(at, key=lambda b: b.points)
        shapes = [fewest, max(at, key=lambda b: b.points)]
        if grid.multiple_at(length) == 1 and 1 < fewest.rows <= grid.row_multiple:
            shapes.append(dataclasses.replace(fewest, rows=1))
        for b in shapes:
            if b not in out:
                out.append(b)
    return out


@dataclasses.dataclass(frozen=True)
class Planned:
    """One executable to plan: `build(spec, runtime, params)` gives its `Job` for any layer count;
    `count`, when given, the same computation for counting its FLOPs and bytes (no loop whose
    body the cost analysis would count once, e.g. the LM head over the whole vocabulary at once)."""

    name: str
    kind: str
    tokens: int  # all chips
    useful: float  # all chips
    build: Any
    count: Any = None
    # a loop of steps (the decode chunk): `steps(n)` builds it with n steps per loop iteration,
    # counted by `step_costs` instead of `layer_costs`
    steps: Any = None


def scoring_jobs(spec: Any, mesh: Mesh, grid: BucketSet, buckets: list[Bucket]) -> list[Planned]:
    """The `Scorer`'s executables for `buckets` of its `grid` (`Scorer.jobs`: nothing else
    compiles)."""

    def build(bucket, whole_vocab=False):
        def job(sp, rt, pa):
            chunk = sp.vocab_size if whole_vocab else None
            scorer = Scorer(
                model=sp, params=pa, mesh=mesh, runtime=rt, buckets=grid, vocab_chunk=chunk
            )
            (one,) = scorer.jobs([bucket])
            return one

        return job

    return [
        Planned(
            f"score T={b.length} K={b.points} B={b.rows}",
            "score",
            b.rows * b.length,
            score_useful_flops(spec, b),
            build(b),
            count=build(b, whole_vocab=True),
        )
        for b in buckets
    ]


def abstract_target(sp: Any, rt: Any, pa: Any) -> EngineTarget:
    """An `EngineTarget` of abstract parameters and stop table (what a run's engine compiles on)."""
    full = replicated(rt.mesh)
    table = StopTable(
        bytes=jax.ShapeDtypeStruct((sp.vocab_size, BUFFER_BYTES), np.int16, sharding=full),
        lengths=jax.ShapeDtypeStruct((sp.vocab_size,), np.int32, sharding=full),
    )
    return EngineTarget(spec=sp, runtime=rt, params=pa, stop_table=table, executables=Executables())


def abstract_engine(
    sp: Any, rt: Any, pa: Any, *, rows: int, slots: int, n_new: int, sample: bool
) -> ContinuousEngine:
    """A `ContinuousEngine` on an `abstract_target`."""
    target = abstract_target(sp, rt, pa)
    return ContinuousEngine(target, rows=rows, slots=slots, n_new=n_new, sample=sample)


def engine_builder(key: EngineKey) -> Callable[[Any, Any, Any], Job]:
    """build(spec, runtime, params) -> the run's own job for the engine call `key`
    (`engine.engine_job` on an `abstract_target`), for any layer count."""
    return lambda sp, rt, pa: engine_job(abstract_target(sp, rt, pa), key)


def generation_jobs(
    spec: Any, mesh: Mesh, *, rows: int, slots: int, n_new: int, prompt: int
) -> list[Planned]:
    """The continuous engine's admission of prompts of `prompt` tokens (their prefill) and
    its decode chunk, as a run builds them (`ContinuousEngine.admit_job`, `decode_job`) on an
    `EngineTarget` of abstract parameters."""

    def engine(sp, rt, pa):
        return abstract_engine(sp, rt, pa, rows=rows, slots=slots, n_new=n_new, sample=False)

    # one `admit` call as `schedule.admission_chunks` cuts them: U distinct prompts of one
    # padded width while U x width <= ADMIT_TOKENS, a longer prompt alone
    width = prefill_bucket(prompt)
    admitted = min(rows, pow2_at_most(max(1, ADMIT_TOKENS // width)))

    def admit_job(sp, rt, pa):
        return engine(sp, rt, pa).admit_job(admitted, admitted, 0, width)

    def decode_steps(n):
        return lambda sp, rt, pa: engine(sp, rt, pa).decode_job(n)

    head = 2 * spec.hidden_size * spec.vocab_size
    prefill = admitted * (2 * spec.body_param_count(active=True) * width + head)
    prefill += admitted * attention_flops(spec, width, 0)
    return [
        Planned(
            f"prefill {admitted} x {width} tokens into {rows} x {slots} slots",
            "prefill",
            admitted * width,
            prefill,
            admit_job,
        ),
        Planned(
            f"decode step {rows} rows x {slots} slots",
            "decode",
            rows,
            decode_useful_flops(spec, rows, slots),
            decode_steps(1),
            steps=decode_steps,
        ),
    ]

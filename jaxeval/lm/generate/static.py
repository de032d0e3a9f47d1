"""Static generation batches: each batch prefills its prompts and decodes until its longest row ends.

    rows, stats = run_static(gen, prompts, on_rows=...)  -> {request position: (tokens, end reason)}

The plan is `gen_plan.plan_gen_batches` (rows grouped by copies, new-token bucket and sampling;
prompt-length buckets); each (shape) compiles once, through the Generator's `Executables`, into the
`kernels.generate.generate` kernel. Batches are dispatched one ahead of the host reading the last.
The continuous engine (`gen_engine`) is the default; this path serves models without a per-row
cache index and `GenConfig(continuous=False)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxeval.kernels.generate import GenerateBatch, GenerateResult, StopTable, generate
from jaxeval.lm.executables import Job
from jaxeval.lm.generate.plan import (
    GenShape,
    PlannedGenBatch,
    Prompt,
    gen_plan_digest,
    plan_gen_batches,
)
from jaxeval.platform import distributed
from jaxeval.platform.mesh import batch_shardings, put_global, to_host

Rows = list[tuple[int, list[int], int]]  # (request position, token ids, end reason)


def static_job(gen: Any, shape: GenShape, example: GenerateBatch) -> Job:
    """`generate` for one bucket shape: (params, stop table, batch, seed) -> GenerateResult,
    the batch split over the batch axes, everything else replicated."""
    kernel = functools.partial(
        generate,
        model=gen.spec,
        runtime=gen.runtime,
        n_new=shape.new,
        copies=shape.copies,
        sample=shape.sample,
    )
    shardings = batch_shardings(gen.mesh, example)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), example, shardings
    )
    seed = jax.ShapeDtypeStruct((), np.int32, sharding=gen.replicated)
    return Job(
        ("static", shape),
        kernel,
        (gen.params, gen.stop_table, abstract, seed),
        in_shardings=(
            jax.tree.map(lambda x: x.sharding, gen.params),
            StopTable(gen.replicated, gen.replicated),
            shardings,
            gen.replicated,
        ),
        out_shardings=gen.replicated,
    )


def run_static(
    gen: Any, prompts: Sequence[Prompt], *, on_rows: Callable[[Rows], None] | None = None
) -> tuple[dict[int, tuple[list[int], int]], dict[str, float]]:
    """Every copy of every prompt in static batches: (request position -> (tokens, end reason),
    stats). `on_rows([(position, tokens, reason)])` is called as each batch finishes."""
    config = gen.config
    plan = plan_gen_batches(
        prompts,
        batch_size=config.batch_size,
        shards=gen.shards,
        shrink_last=config.shrink_last_batch,
    )
    if jax.process_count() > 1:
        distributed.check_same("generation plan", gen_plan_digest(plan))
    seed = put_global(np.int32(config.seed), gen.replicated)
    out: dict[int, tuple[list[int], int]] = {}
    steps = 0

    def collect(pb: PlannedGenBatch, result: Any) -> None:
        nonlocal steps
        res = GenerateResult(*to_host(tuple(result)))
        steps += int(res.steps)
        rows: Rows = []
        for r, pos in enumerate(pb.rows):
            if pos < 0:
                continue
            if int(pos) in out:
                raise AssertionError(f"request {pos} answered twice")
            out[int(pos)] = (res.tokens[r, : res.length[r]].tolist(), int(res.reason[r]))
            rows.append((int(pos), *out[int(pos)]))
        if on_rows is not None:
            on_rows(rows)

    pending: list[tuple[PlannedGenBatch, Any]] = []
    for pb in plan:
        fn = gen.executables.get(static_job(gen, pb.shape, pb.batch))
        batch = put_global(pb.batch, batch_shardings(gen.mesh, pb.batch))
        pending.append((pb, fn(gen.params, gen.stop_table, batch, seed)))
        if len(pending) > 1:  # keep one batch queued while the host reads the last
            collect(*pending.pop(0))
    for item in pending:
        collect(*item)
    return out, {"batches": len(plan), "decode_steps": steps}

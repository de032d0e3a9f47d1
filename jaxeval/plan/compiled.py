"""`jaxeval plan --topology v5e-8`: every executable of a run, compiled for a TPU slice on this host.

The package's pieces: what a run compiles (`jaxeval.plan.jobs`), compiling and counting it
(`jaxeval.plan.costs`), the printed plan (`jaxeval.plan.report`), the slices
(`jaxeval.plan.topology`).

    jaxeval plan --model_args pretrained=configs/models/llama-3-8b --topology v5e-8

From a config.json alone (parameters are `jax.ShapeDtypeStruct`s under the rule table's shardings,
never allocated), each executable a run uses is compiled by the TPU compiler (libtpu) for the
slice's devices (`jaxeval.plan.topology`), through the same code a run takes: the `Scorer`'s bucket
executables and the continuous generation engine's admission (prefill) and decode chunk. Per
executable, per chip:

    HBM       arguments + outputs - donated + temporaries (the compiler's `memory_analysis`),
              against what the compiler lets a program use per chip (v5e: 15.75 of 16 GiB)
    FLOPs     the compiler's `cost_analysis`: its FLOPs and bytes accessed, every layer counted
              (`layer_costs`; `--no_layer_costs`: as reported, a scanned layer once)
    roofline  max(FLOPs / peak, bytes / HBM bandwidth) and the tokens per second it implies
    estimate  the compiler's cycle estimate (`costs.estimated_cycles`) at the chip's clock, plus
              the Pallas and Mosaic kernels it gives no cycles at the roofline of the FLOPs and
              bytes they declare (`costs.kernel_costs`), and the MFU it implies; neither is
              measured on hardware
    useful    model FLOPs / compiled FLOPs: 2 x (active, non-embedding) parameters per token, the
              LM head over the score points only, and causal attention (each query over the keys
              before it, within its window)
    HLO       collectives (all-gather, all-reduce, reduce-scatter, all-to-all, permutes), Pallas
              kernels (tpu_custom_call), CPU custom calls and host transfers (both must be 0)

An executable that does not compile, or does not fit, is reported with the compiler's error and a
fix for its kind of failure (`TopologyPlan.advice`); the command exits with 1 then. A failed
counting compile is reported with its reason (the compiler's counts are shown then). The decode
chunk is a loop of decode steps: its figures are per step (`step_costs`), and what it moves once
per call, outside the steps, is shown apart.

Scoring shapes: the bucket grid a run builds (`lm.score.buckets.fitted_buckets`) for the token
budget the run would pick on this chip (`lm.score.budget.run_token_budget`: half the allowed HBM left after the
parameters), at the lengths given (`--lengths`, default 2,048 and the model's context), each with
the fewest score points (loglikelihood) and the most (rolling perplexity). Generation: one engine of
`--gen_slots` cache slots and as many of 64 rows as the run's rule fits in the HBM left after the
parameters (`lm.generate.sizing.engine_rows`; `--gen_batch_size N`: N rows, refused when they
cannot fit), a prompt of `--gen_slots` - `--max_gen_toks` tokens and its `admit` call as the
engine cuts them (as many such prompts as fit in `lm.generate.sizing.ADMIT_TOKENS` padded
tokens, a longer one alone).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.sizing import engine_rows
from jaxeval.lm.model_config import MAX_BATCH_SIZE
from jaxeval.lm.score.buckets import fitted_buckets
from jaxeval.lm.score.budget import run_token_budget
from jaxeval.models.families import spec_from_config
from jaxeval.models.runtime import make_runtime
from jaxeval.plan.costs import (
    Compiled,
    compile_job,
    layer_costs,
    sharded_abstract_params,
    step_costs,
)
from jaxeval.plan.figures import FigureCache
from jaxeval.plan.jobs import (
    Planned,
    generation_jobs,
    param_bytes_per_chip,
    score_buckets,
    scoring_jobs,
    topology_mesh,
)
from jaxeval.plan.memory import DEFAULT_GEN_ROWS, read_config
from jaxeval.plan.report import TopologyPlan, compiler_versions
from jaxeval.plan.topology import get_topology
from jaxeval.platform.mesh import batch_shards


def generation_planned(
    spec: Any,
    mesh: Any,
    topo: Any,
    *,
    free_bytes: int,
    rows: int | None,
    slots: int,
    n_new: int,
    progress: Any = None,
) -> tuple[list[Planned], list[Compiled]]:
    """The generation engine's jobs (`generation_jobs`) on `rows` rows (None: as many of
    `DEFAULT_GEN_ROWS` as the run's rule fits in `free_bytes`), or, when no engine fits, no jobs
    and a `Compiled` that says why, with the fix."""
    try:
        fit = engine_rows(
            spec,
            free_bytes=free_bytes,
            shards=batch_shards(mesh),
            slots=slots,
            wanted=rows or DEFAULT_GEN_ROWS,
            explicit=rows is not None,
            what=f"generation on {topo.name}",
        )
    except JaxevalError as e:
        refused = Compiled(
            name=f"generation engine of {slots:,} slots", kind="decode", tokens=0,
            useful_flops=0.0,
            error=f"RESOURCE_EXHAUSTED before compiling, by the run's rule: {e.message}",
        )  # fmt: skip
        return [], [refused]
    if progress is not None:
        progress(f"generation engine: {fit.text()}")
    prompt = max(16, slots - n_new)
    return generation_jobs(spec, mesh, rows=fit.rows, slots=slots, n_new=n_new, prompt=prompt), []


def compile_planned(
    job: Planned,
    spec: Any,
    runtime: Any,
    params: Any,
    *,
    mesh: Any,
    dtype: str,
    count_layers: bool,
    cache: FigureCache | None,
) -> Compiled:
    """One planned job compiled for the slice, its FLOPs and bytes counted over every layer
    (`layer_costs`, a decode job per step) unless `count_layers` is False; a counting error is
    kept with its reason and the full compile still runs."""
    cost, count_error = None, None
    try:
        if count_layers and job.steps is not None:
            cost = step_costs(job.steps, spec, runtime, mesh, dtype, cache=cache)
        elif count_layers:
            build = job.count or job.build
            cost = layer_costs(build, spec, runtime, mesh, dtype, cache=cache)
    except Exception as e:
        count_error = " ".join(f"{type(e).__name__}: {e}".split())
    return compile_job(
        job.build(spec, runtime, params),
        name=job.name,
        kind=job.kind,
        tokens=job.tokens,
        useful=job.useful / mesh.devices.size,
        cost=cost,
        count_error=count_error,
        cache=cache,
    )


def plan_topology(
    config: Any,
    topology: str,
    *,
    dtype: str = "bfloat16",
    preset: str = "fsdp",
    attention: str | None = None,
    max_length: int | None = None,
    token_budget: int | None = None,
    lengths: list[int] | None = None,
    gen_rows: int | None = None,
    gen_slots: int = 4096,
    gen_new: int = 256,
    generation: bool = True,
    count_layers: bool = True,
    progress: Any = None,
    keep: Any = None,
    cache: FigureCache | None = None,
) -> TopologyPlan:
    """Compiles every executable of a run of `config` on `topology` (module docstring);
    `keep(planned) -> bool`, when given, picks some of them; `cache`, when given, keeps what the
    compiler said of each program and reads it back instead of compiling it again. `gen_rows`
    None: as many of `DEFAULT_GEN_ROWS` as the run's rule fits in the HBM left
    (`lm.generate.sizing.engine_rows`); given: those rows, refused when they cannot fit."""
    topo = get_topology(topology)
    mesh = topology_mesh(topo, preset)
    spec = spec_from_config(config, compute_dtype=dtype)
    runtime = make_runtime(mesh, attention)
    params = sharded_abstract_params(spec, mesh, dtype)
    per_chip = param_bytes_per_chip(params)
    max_length = int(max_length or spec.max_position_embeddings)
    shards = batch_shards(mesh)
    if (
        per_chip > topo.chip.allowed_hbm_bytes
    ):  # nothing can fit: say so before minutes of compiling
        return TopologyPlan(
            topology=topo, model_type=spec.model_type, dtype=dtype, attention=runtime.attention.name,
            mesh=dict(mesh.shape), parameters=spec.param_count(), param_bytes=per_chip,
            token_budget=int(token_budget or 0), executables=(),
        )  # fmt: skip
    if token_budget is None:
        token_budget = run_token_budget(
            spec, topo.chip.allowed_hbm_bytes - per_chip, shards, max_length, MAX_BATCH_SIZE
        )
    grid = fitted_buckets(max_length=max_length, token_budget=token_budget, row_multiple=shards)
    lengths = lengths or sorted({min(2048, max_length), max_length})
    planned = scoring_jobs(spec, mesh, grid, score_buckets(grid, lengths))
    compiled: list[Compiled] = []
    if generation:
        jobs, refused = generation_planned(
            spec, mesh, topo, free_bytes=topo.chip.allowed_hbm_bytes - per_chip,
            rows=gen_rows, slots=min(gen_slots, max_length), n_new=gen_new, progress=progress,
        )  # fmt: skip
        planned += jobs
        compiled += refused
    if keep is not None:
        planned = [job for job in planned if keep(job)]
    for job in planned:
        if progress is not None:
            progress(f"compiling {job.name} for {topo.name}")
        compiled.append(
            compile_planned(
                job, spec, runtime, params, mesh=mesh, dtype=dtype,
                count_layers=count_layers, cache=cache,
            )
        )  # fmt: skip
    return TopologyPlan(
        topology=topo,
        model_type=spec.model_type,
        dtype=dtype,
        attention=runtime.attention.name,
        mesh=dict(mesh.shape),
        parameters=spec.param_count(),
        param_bytes=per_chip,
        token_budget=int(token_budget),
        executables=tuple(compiled),
    )


def print_topology_plan(
    model_args: dict[str, Any],
    topology: str,
    *,
    preset: str = "fsdp",
    attention: str | None = None,
    lengths: list[int] | None = None,
    token_budget: int | None = None,
    gen_rows: int | None = None,
    gen_slots: int = 4096,
    gen_new: int = 256,
    generation: bool = True,
    count_layers: bool = True,
    as_json: bool = False,
    plan_cache: str | None = None,
) -> int:
    """`jaxeval plan --topology NAME`: compiles the run of `model_args` (`plan_model_args`) for the
    slice `topology` (`plan_topology`, progress on stderr), prints its table or JSON, and the advice
    on stderr when an executable does not compile or fit; the exit status, 0 or 1 then. What the
    compiler said of each program is kept in `plan_cache` (`figures.FigureCache.open`: by default
    `<cache home>/plan`, `JAXEVAL_PLAN_CACHE=off` for none), so a second plan of the same
    shapes reads it back instead of compiling."""
    plan = plan_topology(
        read_config(str(model_args["pretrained"])),
        topology,
        dtype=str(model_args.get("dtype", "bfloat16")),
        preset=preset,
        attention=attention,
        max_length=int(model_args["max_length"]) if "max_length" in model_args else None,
        token_budget=token_budget,
        lengths=lengths,
        gen_rows=gen_rows,
        gen_slots=gen_slots,
        gen_new=gen_new,
        generation=generation,
        count_layers=count_layers,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        cache=FigureCache.open(plan_cache, compiler=compiler_versions()),
    )
    print(json.dumps(plan.to_json(), indent=2) if as_json else plan.table())
    if not plan.ok:
        print(plan.advice(), file=sys.stderr)
    return 0 if plan.ok else 1

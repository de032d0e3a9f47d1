"""`jaxeval plan --topology v5e-8`: every executable of a run, compiled for a TPU slice on this host.

    jaxeval plan --model_args pretrained=configs/models/llama-3-8b --topology v5e-8

From a config.json alone (parameters are `jax.ShapeDtypeStruct`s under the rule table's shardings,
never allocated), each executable a run uses is compiled by the TPU compiler (libtpu) for the
slice's devices (`jaxeval.plan.topology`), through the same code a run takes: the `Scorer`'s bucket
executables and the continuous generation engine's admission (prefill) and decode chunk. Per
executable, per chip:

    HBM       arguments + outputs - donated + temporaries (the compiler's `memory_analysis`),
              against the chip's capacity
    FLOPs     the compiler's `cost_analysis`: its FLOPs and bytes accessed, every layer counted
              (`layer_costs`; `--no_layer_costs`: as reported, a scanned layer once)
    roofline  max(FLOPs / peak, bytes / HBM bandwidth) and the tokens per second it implies
    useful    model FLOPs / compiled FLOPs: 2 x (active, non-embedding) parameters per token, the
              LM head over the score points only, and causal attention (each query over the keys
              before it, within its window)
    HLO       collectives (all-gather, all-reduce, reduce-scatter, all-to-all, permutes), Pallas
              kernels (tpu_custom_call), CPU custom calls and host transfers (both must be 0)

An executable that does not compile, or does not fit, is reported with the compiler's error and a
fix; the command exits with 1 then. The decode chunk is a loop of decode steps: its figures are
per step (`step_costs`), and what it moves once per call, outside the steps, is shown apart.

Scoring shapes: the bucket grid a run builds (`lm.buckets.fitted_buckets`) for the token budget the
run would pick on this chip (`lm.jax_lm.token_budget_for`: half the HBM left after the
parameters), at the lengths given (`--lengths`, default 2,048 and the model's context), each with
the fewest score points (loglikelihood) and the most (rolling perplexity). Generation: one engine of
`--gen_batch_size` rows x `--gen_slots` cache slots, a prompt of `--gen_slots` - `--max_gen_toks`
tokens and its `admit` call as the engine cuts them (as many such prompts as fit in
`gen_engine.ADMIT_TOKENS` padded tokens, a longer one alone).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.kernels.continuous import AdmitBatch, RowSettings, admit
from jaxeval.kernels.generate import StopTable
from jaxeval.lm.executables import Job
from jaxeval.lm.generate.engine import ADMIT_TOKENS, ContinuousEngine
from jaxeval.lm.generate.plan import prefill_bucket
from jaxeval.lm.generate.stops import BUFFER_BYTES, STOP_BYTES, STOP_STRINGS, STOP_TOKENS
from jaxeval.lm.jax_lm import token_budget_for
from jaxeval.lm.score.buckets import Bucket, BucketSet, fitted_buckets
from jaxeval.lm.score.scorer import Scorer
from jaxeval.models.attention import NO_WINDOW
from jaxeval.models.families import spec_from_config
from jaxeval.models.loader import with_backends
from jaxeval.models.sharding import param_shardings
from jaxeval.plan.memory import active_param_count, plan_model_args, read_config
from jaxeval.plan.topology import Topology, get_topology, topology_devices
from jaxeval.platform.mesh import MESH_AXES, batch_shards, load_presets, replicated
from jaxeval.shapes import pow2_at_most

GIB = 1 << 30
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
CPU_TARGETS = ("jaxeval_decode_attention", "jaxeval_packed_attention")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Compiled:
    """One executable's figures per chip (module docstring); `error` when it did not compile."""

    name: str
    kind: str  # score, prefill or decode
    tokens: int  # tokens one call processes (all chips): rows x length, or rows for a decode step
    useful_flops: float  # per chip
    error: str | None = None
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    temp_bytes: int = 0
    flops: float = 0.0
    bytes_accessed: float = 0.0
    collectives: dict[str, int] = dataclasses.field(default_factory=dict)
    pallas_kernels: int = 0
    cpu_custom_calls: int = 0
    host_transfers: int = 0
    compile_s: float = 0.0
    # FLOPs and bytes counted over every layer (`layer_costs`); False: the compiler's own counts,
    # which take a scanned layer body once, so the roofline and the ratios are not computed
    layers_counted: bool = True
    once_bytes: float = 0.0  # a loop's executable: bytes moved once per call, outside its steps

    @property
    def hbm_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    def roofline_s(self, topo: Topology) -> float:
        return max(self.flops / topo.chip.peak_flops, self.bytes_accessed / topo.chip.hbm_bandwidth)

    def summary(self, topo: Topology) -> dict[str, Any]:
        """The row of the table, as numbers (the JSON output)."""
        out = dataclasses.asdict(self)
        if self.error is None:
            t = self.roofline_s(topo)
            out.update(hbm_bytes=self.hbm_bytes, fits=self.hbm_bytes <= topo.chip.hbm_bytes)
            if self.layers_counted:
                out.update(
                    roofline_s=t,
                    tokens_per_s=self.tokens / t if t else 0.0,
                    useful_over_compiled=self.useful_flops / self.flops if self.flops else 0.0,
                    roofline_mfu=self.useful_flops / (t * topo.chip.peak_flops) if t else 0.0,
                )
        return out


def hlo_facts(text: str) -> dict[str, Any]:
    """Counts in an optimized HLO module's text: collectives (async pairs counted once), Pallas TPU
    kernels, our CPU custom calls, host transfers."""
    collectives = {}
    for op in COLLECTIVES:
        n = len(re.findall(rf" {op}(?:-start)?\(", text))  # async: -start counted, -done not
        if n:
            collectives[op] = n
    host = len(re.findall(r"is_host_transfer=true|custom_call_target=\"MoveToHost\"", text))
    host += len(re.findall(r"\bS\(5\)", text))  # the host memory space
    return {
        "collectives": collectives,
        "pallas_kernels": text.count('custom_call_target="tpu_custom_call"'),
        "cpu_custom_calls": sum(text.count(f'"{t}"') for t in CPU_TARGETS),
        "host_transfers": host,
    }


def _cost(exe: Any) -> tuple[float, float]:
    """(FLOPs, bytes accessed) of a compiled executable, per chip."""
    cost = exe.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def compile_job(
    job: Job,
    *,
    name: str,
    kind: str,
    tokens: int,
    useful: float,
    cost: tuple[float, ...] | None = None,
) -> Compiled:
    """`job` compiled for its mesh's devices, described; a compiler error is caught and kept.
    `cost`: (FLOPs, bytes[, bytes once per call]) counted another way (`layer_costs`,
    `step_costs`), else the compiler's."""
    start = time.perf_counter()
    try:
        exe = job.lower().compile()
    except Exception as e:  # the compiler's words (an HBM overflow is a RESOURCE_EXHAUSTED)
        message = " ".join(str(e).split())
        return Compiled(name=name, kind=kind, tokens=tokens, useful_flops=useful, error=message)
    seconds = time.perf_counter() - start
    mem = exe.memory_analysis()
    flops, nbytes, *once = cost if cost is not None else _cost(exe)
    return Compiled(
        name=name,
        kind=kind,
        tokens=tokens,
        useful_flops=useful,
        argument_bytes=int(mem.argument_size_in_bytes),
        output_bytes=int(mem.output_size_in_bytes),
        alias_bytes=int(mem.alias_size_in_bytes),
        temp_bytes=int(mem.temp_size_in_bytes),
        flops=flops,
        bytes_accessed=nbytes,
        compile_s=seconds,
        layers_counted=cost is not None,
        once_bytes=once[0] if once else 0.0,
        **hlo_facts(exe.as_text()),
    )


def first_layers(spec: Any, n: int) -> Any:
    """`spec` cut to its first `n` layers, its layer scans unrolled (exact costs)."""
    cut: dict[str, Any] = {
        "num_layers": n,
        "sliding_window": spec.sliding_window[:n],
        "attn_scale": spec.attn_scale[:n],
        "unroll_layers": True,
    }
    if spec.rope:
        cut["rope"] = spec.rope[:n]
    if spec.rope_layers:
        cut["rope_layers"] = spec.rope_layers[:n]
    return dataclasses.replace(spec, **cut)


def layer_period(spec: Any) -> int:
    """The smallest p such that the layers after the dense ones repeat every p layers (Gemma-2's
    alternating windows: 2)."""
    d, n = spec.dense_layers, spec.num_layers
    rows = list(zip(spec.sliding_window, spec.attn_scale, spec.rope_layers or [True] * n))[d:]
    for p in range(1, len(rows) + 1):
        if all(rows[i] == rows[i % p] for i in range(len(rows))):
            return p
    return len(rows)


# libtpu's options for the counting compiles of `layer_costs`: no windowed einsum (a collective
# matmul's loop), so that every matmul's FLOPs count in full
COUNTING_OPTIONS = {"xla_jf_spmd_threshold_for_windowed_einsum_mib": 1 << 20}


def layer_costs(build: Any, spec: Any, mesh: Mesh, dtype: str) -> tuple[float, float]:
    """(FLOPs, bytes) per chip of `build(spec, params)`'s executable, every layer counted.

    XLA's cost analysis counts a loop's body once, and the layers are a loop (`lax.scan`). So the
    executable is compiled for its first a = dense + 2 and a + p layers (p: `layer_period`),
    unrolled, and the cost extrapolated linearly to L layers: C(a) + (L - a) / p * (C(a+p) - C(a)).
    (From one layer on it is not linear: the TPU compiler treats a lone layer's matmuls apart.)
    These compiles also turn off the TPU's windowed einsums (`COUNTING_OPTIONS`), which turn each
    fsdp matmul into a loop over the weight's shards: the same FLOPs and bytes, counted once per
    shard otherwise. Loops inside a layer (the reference attention's block loops) still count once.
    """
    a, p, n = spec.dense_layers + 2, layer_period(spec), spec.num_layers
    points = [a, a + p] if a + p < n else [n]
    costs = []
    tpu = {d.platform for d in mesh.devices.flat} == {"tpu"}
    for k in points:
        cut = first_layers(spec, k)
        lowered = build(cut, sharded_abstract_params(cut, mesh, dtype)).lower()
        costs.append(_cost(lowered.compile(compiler_options=COUNTING_OPTIONS if tpu else None)))
    if len(costs) == 1:
        return costs[0]
    (fa, ba), (fb, bb) = costs
    scale = (n - a) / p
    return fa + scale * (fb - fa), ba + scale * (bb - ba)


def step_costs(steps: Any, spec: Any, mesh: Mesh, dtype: str) -> tuple[float, float, float]:
    """(FLOPs, bytes) per chip of one step of a loop of steps, and the bytes moved once per call
    outside the loop (layout copies of the weights on entry, say).

    The cost analysis counts a loop's body once, on top of what runs before and after the loop.
    So `steps(n)` (the loop with n steps per iteration) is compiled for n = 1 and 2, every layer
    unrolled (a decode step's cost is not linear in a few layers: the compiler stages small caches
    through on-chip memory), and one step is the difference.
    """
    tpu = {d.platform for d in mesh.devices.flat} == {"tpu"}
    cut = first_layers(spec, spec.num_layers)
    params = sharded_abstract_params(cut, mesh, dtype)
    (f1, b1), (f2, b2) = (
        _cost(
            steps(n)(cut, params)
            .lower()
            .compile(compiler_options=COUNTING_OPTIONS if tpu else None)
        )
        for n in (1, 2)
    )
    return f2 - f1, b2 - b1, max(0.0, b1 - (b2 - b1))


# ---- the model's useful FLOPs ----------------------------------------------------------------


def body_params(spec: Any) -> int:
    """Parameters one token multiplies by outside the embedding and the LM head (a Mixture of
    Experts' routed experts counted K of X)."""
    embed = spec.vocab_size * spec.hidden_size
    head = 0 if spec.tie_embeddings else embed
    return active_param_count(spec) - embed - head


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
    body = 2 * body_params(spec) * bucket.rows * bucket.length
    head = 2 * spec.hidden_size * spec.vocab_size * bucket.rows * bucket.points
    return body + head + bucket.rows * attention_flops(spec, bucket.length, 0)


def decode_useful_flops(spec: Any, rows: int, context: int) -> float:
    """One decode step of `rows` rows at `context` cached tokens each; all chips."""
    return rows * (
        2 * body_params(spec) + 2 * spec.hidden_size * spec.vocab_size
    ) + rows * attention_flops(spec, 1, context)


# ---- the executables -----------------------------------------------------------------------


def topology_mesh(topo: Topology, preset: str = "fsdp", **sizes: int) -> Mesh:
    """A (data, fsdp, model) mesh of a preset of configs/meshes.yaml on the slice's devices."""
    presets = load_presets()
    if preset not in presets:
        raise JaxevalError(
            f"unknown mesh preset {preset!r}", field="mesh", hint=f"use one of {', '.join(presets)}"
        )
    devices = topology_devices(topo.name)
    chosen = dataclasses.replace(presets[preset], **sizes)
    if chosen.sizes() == (1, 1, 1):  # "single": one chip of the slice
        devices = devices[:1]
    shape = chosen.resolve(len(devices))
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), MESH_AXES)


def sharded_abstract_params(spec: Any, mesh: Mesh, dtype: str) -> Any:
    """The parameters as `ShapeDtypeStruct`s under the rule table's shardings on `mesh`."""
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        spec.abstract_params(dtype),
        param_shardings(spec, mesh),
    )


def param_bytes_per_chip(params: Any) -> int:
    total = 0
    for x in jax.tree.leaves(params):
        shard = x.sharding.shard_shape(x.shape)
        total += int(np.prod(shard)) * np.dtype(x.dtype).itemsize
    return total


def score_buckets(grid: Any, lengths: list[int]) -> list[Bucket]:
    """Per length (the grid's nearest at or above), the buckets with the fewest and most points."""
    out: list[Bucket] = []
    for want in lengths:
        length = min((b.length for b in grid if b.length >= want), default=grid.max_length)
        at = [b for b in grid if b.length == length]
        for b in (min(at, key=lambda b: b.points), max(at, key=lambda b: b.points)):
            if b not in out:
                out.append(b)
    return out


@dataclasses.dataclass(frozen=True)
class Planned:
    """One executable to plan: `build(spec, params)` gives its `Job` for any layer count;
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
    """The `Scorer`'s executables for `buckets` of its `grid` (nothing else compiles)."""

    def build(bucket, whole_vocab=False):
        def job(sp, pa):
            chunk = sp.vocab_size if whole_vocab else None
            scorer = Scorer(model=sp, params=pa, mesh=mesh, buckets=grid, vocab_chunk=chunk)
            return scorer.job(bucket)

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


@dataclasses.dataclass
class _AbstractGenerator:
    """What `ContinuousEngine` reads of a `Generator`, abstract: nothing is allocated."""

    spec: Any
    mesh: Mesh
    params: Any
    replicated: Any
    stop_table: StopTable


def _admission(admitted: int, width: int) -> AdmitBatch:
    """An admission of `admitted` prompts of `width` tokens (shapes only matter)."""
    settings = RowSettings(
        key_ids=np.zeros((admitted, 2), np.int32),
        max_new=np.zeros(admitted, np.int32),
        greedy=np.zeros(admitted, bool),
        temperature=np.zeros(admitted, np.float32),
        top_k=np.zeros(admitted, np.int32),
        top_p=np.zeros(admitted, np.float32),
        stop_ids=np.zeros((admitted, STOP_TOKENS), np.int32),
        stops=np.zeros((admitted, STOP_STRINGS, STOP_BYTES), np.int32),
    )
    return AdmitBatch(
        tokens=np.zeros((admitted, width), np.int32),
        valid=np.zeros((admitted, width), bool),
        start=np.int32(0),
        dst=np.zeros(admitted, np.int32),
        src=np.zeros(admitted, np.int32),
        settings=settings,
    )


def generation_jobs(
    spec: Any, mesh: Mesh, *, rows: int, slots: int, n_new: int, prompt: int
) -> list[Planned]:
    """The continuous engine's admission of prompts of `prompt` tokens (their prefill) and
    its decode chunk, as a run builds them (`lm.gen_engine.ContinuousEngine`)."""
    full = replicated(mesh)
    seed = np.int32(0)

    def engine(sp, pa):
        table = StopTable(
            bytes=jax.ShapeDtypeStruct((sp.vocab_size, BUFFER_BYTES), np.int16, sharding=full),
            lengths=jax.ShapeDtypeStruct((sp.vocab_size,), np.int32, sharding=full),
        )
        gen = _AbstractGenerator(sp, mesh, pa, full, table)
        return ContinuousEngine(gen, rows=rows, slots=slots, n_new=n_new, sample=False)

    # one `admit` call as `gen_engine.admission_chunks` cuts them: U distinct prompts of one
    # padded width while U x width <= ADMIT_TOKENS, a longer prompt alone
    width = prefill_bucket(prompt)
    admitted = min(rows, pow2_at_most(max(1, ADMIT_TOKENS // width)))
    batch = _admission(admitted, width)

    def admit_job(sp, pa):
        def kernel(params, table, state, prefix, b, sd):
            return admit(params, table, state, prefix, b, sd, model=sp, sample=False, mesh=mesh)

        prefix = jax.eval_shape(lambda: sp.init_cache(1, 0))
        key = ("admit", rows, slots, n_new, False, admitted, admitted, 0, width)
        return engine(sp, pa)._state_job(key, kernel, prefix, batch, seed)

    def decode_job(sp, pa, steps=1):
        return engine(sp, pa)._decode_job(seed, np.int32(0), steps)

    def decode_steps(n):
        return lambda sp, pa: decode_job(sp, pa, n)

    head = 2 * spec.hidden_size * spec.vocab_size
    prefill = admitted * (2 * body_params(spec) * width + head)
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
            decode_job,
            steps=decode_steps,
        ),
    ]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TopologyPlan:
    """Everything `jaxeval plan --topology` prints."""

    topology: Topology
    model_type: str
    dtype: str
    attention: str
    mesh: dict[str, int]
    parameters: int
    param_bytes: int  # per chip
    token_budget: int
    executables: tuple[Compiled, ...]

    @property
    def params_fit(self) -> bool:
        return self.param_bytes <= self.topology.chip.hbm_bytes

    @property
    def ok(self) -> bool:
        chip = self.topology.chip
        fits = all(e.error is None and e.hbm_bytes <= chip.hbm_bytes for e in self.executables)
        return self.params_fit and fits

    def advice(self) -> str:
        """What to change when an executable does not compile or does not fit."""
        chip = self.topology.chip
        lines = []
        if not self.params_fit:
            lines.append(
                f"the parameters alone take {self.param_bytes / GIB:.2f} GiB per chip, the chip "
                f"has {chip.hbm_bytes / GIB:.0f} GiB: nothing was compiled"
            )
        for e in self.executables:
            if e.error is not None:
                lines.append(f"{e.name}: does not compile: {e.error[:500]}")
            elif e.hbm_bytes > chip.hbm_bytes:
                lines.append(
                    f"{e.name}: needs {e.hbm_bytes / GIB:.2f} GiB per chip, "
                    f"the chip has {chip.hbm_bytes / GIB:.0f} GiB"
                )
        if lines:
            lines.append(
                "fix: a larger slice (more chips share the parameters), dtype=bfloat16, "
                "a smaller --token_budget (scoring), or fewer --gen_batch_size rows / "
                "--gen_slots (generation)"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "topology": self.topology.name,
            "chip": dataclasses.asdict(self.topology.chip),
            "hosts": self.topology.hosts,
            "model_type": self.model_type,
            "dtype": self.dtype,
            "attention": self.attention,
            "mesh": self.mesh,
            "parameters": self.parameters,
            "param_bytes_per_chip": self.param_bytes,
            "token_budget": self.token_budget,
            "executables": [e.summary(self.topology) for e in self.executables],
            "params_fit": self.params_fit,
            "ok": self.ok,
        }

    def table(self) -> str:
        """Markdown: one line per executable (docs/tpu.md is this output)."""
        topo, chip = self.topology, self.topology.chip
        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
        lines = [
            f"**{self.model_type}**, {self.parameters / 1e9:.2f} B parameters in {self.dtype}, "
            f"on {topo.name} ({topo.chips} x {chip.name}, {topo.hosts} host"
            f"{'s' if topo.hosts > 1 else ''}, {chip.hbm_bytes / GIB:.0f} GiB HBM per chip), "
            f"mesh {mesh}, attention `{self.attention}`; parameters "
            f"{self.param_bytes / GIB:.2f} GiB per chip"
            + (" (**over**: nothing compiled)" if not self.params_fit else "")
            + f", token budget {self.token_budget:,}",
            "",
            "| executable | HBM GiB / chip | GFLOP / chip | GB / chip | roofline ms | tokens/s |"
            " useful / compiled | roofline MFU | collectives | Pallas | CPU calls, host |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for e in self.executables:
            if e.error is not None:
                lines.append(f"| {e.name} | **does not compile**: {e.error[:300]} |" + " |" * 9)
                continue
            s = e.summary(topo)
            fits = "" if s["fits"] else " **over**"
            coll = ", ".join(f"{k} {v}" for k, v in e.collectives.items()) or "none"
            if e.layers_counted:
                rates = (
                    f"{s['roofline_s'] * 1e3:,.2f} | {s['tokens_per_s']:,.0f} | "
                    f"{s['useful_over_compiled']:.0%} | {s['roofline_mfu']:.0%}"
                )
            else:  # the compiler's counts: a scanned layer once
                rates = "- | - | - | -"
            one = "" if e.layers_counted else " (one layer)"
            name = e.name + (f" (+{e.once_bytes / 1e9:,.2f} GB a call)" if e.once_bytes else "")
            lines.append(
                f"| {name} | {e.hbm_bytes / GIB:.2f}{fits} | {e.flops / 1e9:,.1f}{one} | "
                f"{e.bytes_accessed / 1e9:,.2f}{one} | {rates} | {coll} | {e.pallas_kernels} | "
                f"{e.cpu_custom_calls}, {e.host_transfers} |"
            )
        return "\n".join(lines)


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
    gen_rows: int = 64,
    gen_slots: int = 4096,
    gen_new: int = 256,
    generation: bool = True,
    count_layers: bool = True,
    progress: Any = None,
    keep: Any = None,
) -> TopologyPlan:
    """Compiles every executable of a run of `config` on `topology` (module docstring);
    `keep(planned) -> bool`, when given, picks some of them."""
    topo = get_topology(topology)
    mesh = topology_mesh(topo, preset)
    spec = with_backends(spec_from_config(config, compute_dtype=dtype), mesh, attention)
    params = sharded_abstract_params(spec, mesh, dtype)
    per_chip = param_bytes_per_chip(params)
    max_length = int(max_length or spec.max_position_embeddings)
    shards = batch_shards(mesh)
    if per_chip > topo.chip.hbm_bytes:  # nothing can fit: say so before minutes of compiling
        return TopologyPlan(
            topology=topo, model_type=spec.model_type, dtype=dtype, attention=spec.attention.name,
            mesh=dict(mesh.shape), parameters=spec.param_count(), param_bytes=per_chip,
            token_budget=int(token_budget or 0), executables=(),
        )  # fmt: skip
    if token_budget is None:
        token_budget = token_budget_for(
            spec, topo.chip.hbm_bytes - per_chip, shards, max_length, max_batch_size=64
        )
    grid = fitted_buckets(max_length=max_length, token_budget=token_budget, row_multiple=shards)
    lengths = lengths or sorted({min(2048, max_length), max_length})
    planned = scoring_jobs(spec, mesh, grid, score_buckets(grid, lengths))
    if generation:
        slots = min(gen_slots, max_length)
        prompt = max(16, slots - gen_new)
        planned += generation_jobs(
            spec, mesh, rows=gen_rows, slots=slots, n_new=gen_new, prompt=prompt
        )
    if keep is not None:
        planned = [job for job in planned if keep(job)]
    chips = mesh.devices.size
    compiled = []
    for job in planned:
        if progress is not None:
            progress(f"compiling {job.name} for {topo.name}")
        cost = None
        try:
            if count_layers and job.steps is not None:
                cost = step_costs(job.steps, spec, mesh, dtype)
            elif count_layers:
                cost = layer_costs(job.count or job.build, spec, mesh, dtype)
        except Exception:  # the full compile below reports the error
            cost = None
        compiled.append(
            compile_job(
                job.build(spec, params),
                name=job.name,
                kind=job.kind,
                tokens=job.tokens,
                useful=job.useful / chips,
                cost=cost,
            )
        )
    return TopologyPlan(
        topology=topo,
        model_type=spec.model_type,
        dtype=dtype,
        attention=spec.attention.name,
        mesh=dict(mesh.shape),
        parameters=spec.param_count(),
        param_bytes=per_chip,
        token_budget=int(token_budget),
        executables=tuple(compiled),
    )


def main(argv: list[str]) -> int:
    """`jaxeval plan --topology NAME --model_args pretrained=DIR[,dtype=D,max_length=N] ...`."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="jaxeval plan --topology", description=__doc__.splitlines()[0])
    p.add_argument("--topology", required=True, help="a TPU slice: v5e-8, v4-8, v5p-8, v6e-8, ...")
    p.add_argument("--model_args", required=True, help="pretrained=DIR (config.json only)")
    p.add_argument("--mesh", default="fsdp", help="a preset of configs/meshes.yaml")
    p.add_argument("--attention", default=None, help="attention backend (default: auto)")
    p.add_argument("--lengths", default=None, help="scoring row lengths, e.g. 2048,8192")
    p.add_argument("--token_budget", type=int, default=None, help="tokens per scoring batch")
    p.add_argument("--gen_batch_size", type=int, default=64, help="generation engine rows")
    p.add_argument("--gen_slots", type=int, default=4096, help="KV-cache slots per row")
    p.add_argument("--max_gen_toks", type=int, default=256, help="new tokens per row")
    p.add_argument("--no_generation", action="store_true", help="scoring executables only")
    p.add_argument(
        "--no_layer_costs",
        action="store_true",
        help="report the compiler's FLOPs and bytes as they are (a scanned layer counted once) "
        "instead of extrapolating them from two- and three-layer compiles (about half the time)",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    args = p.parse_args(argv)
    model_args = plan_model_args(args.model_args)
    lengths = None
    if args.lengths:
        try:
            lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        except ValueError:
            raise JaxevalError(
                f"cannot parse --lengths {args.lengths!r}", hint="give lengths like 2048,8192"
            ) from None
    plan = plan_topology(
        read_config(str(model_args["pretrained"])),
        args.topology,
        dtype=str(model_args.get("dtype", "bfloat16")),
        preset=args.mesh,
        attention=args.attention,
        max_length=int(model_args["max_length"]) if "max_length" in model_args else None,
        token_budget=args.token_budget,
        lengths=lengths,
        gen_rows=args.gen_batch_size,
        gen_slots=args.gen_slots,
        gen_new=args.max_gen_toks,
        generation=not args.no_generation,
        count_layers=not args.no_layer_costs,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps(plan.to_json(), indent=2) if args.json else plan.table())
    if not plan.ok:
        print(plan.advice(), file=sys.stderr)
    return 0 if plan.ok else 1

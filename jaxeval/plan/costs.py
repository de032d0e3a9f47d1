"""Compiling a planned executable for a TPU slice and reading back what the compiler says.

    compiled = compile_job(job, name=..., kind="score", tokens=..., useful=...)   # a `Compiled`
    flops, nbytes = layer_costs(build, spec, runtime, mesh, dtype)   # every layer counted
    flops, nbytes, once = step_costs(steps, spec, runtime, mesh, dtype)   # one step of a loop

Every compile goes through `jaxeval.lm.executables.Executables`, the one compile boundary (the
counting compiles with `COUNTING_OPTIONS`). Per executable, per chip:

    HBM       arguments + outputs - donated + temporaries (the compiler's `memory_analysis`)
    FLOPs     the compiler's `cost_analysis`, every layer counted (`layer_costs`; a scanned layer
              body counts once otherwise)
    roofline  max(FLOPs / peak, bytes / HBM bandwidth): a bound, not a measurement
    HLO       collectives, Pallas kernels (tpu_custom_call), CPU custom calls, host transfers
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh

from jaxeval.lm.executables import Executables, Job
from jaxeval.models.runtime import Runtime
from jaxeval.models.sharding import param_shardings
from jaxeval.plan.topology import Topology

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
                    mfu_bound=self.useful_flops / (t * topo.chip.peak_flops) if t else 0.0,
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


def sharded_abstract_params(spec: Any, mesh: Mesh, dtype: str) -> Any:
    """The parameters as `ShapeDtypeStruct`s under the rule table's shardings on `mesh`."""
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        spec.abstract_params(dtype),
        param_shardings(spec, mesh),
    )


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
    executables = Executables("jaxeval-plan")
    start = time.perf_counter()
    try:
        executables.get(job)
    except Exception as e:  # the compiler's words (an HBM overflow is a RESOURCE_EXHAUSTED)
        message = " ".join(str(e).split())
        return Compiled(name=name, kind=kind, tokens=tokens, useful_flops=useful, error=message)
    seconds = time.perf_counter() - start
    facts = executables.describe(job.key)
    flops, nbytes, *once = (
        cost if cost is not None else (facts.get("flops", 0.0), facts.get("bytes_accessed", 0.0))
    )
    return Compiled(
        name=name,
        kind=kind,
        tokens=tokens,
        useful_flops=useful,
        argument_bytes=int(facts.get("argument_bytes", 0)),
        output_bytes=int(facts.get("output_bytes", 0)),
        alias_bytes=int(facts.get("alias_bytes", 0)),
        temp_bytes=int(facts.get("temp_bytes", 0)),
        flops=flops,
        bytes_accessed=nbytes,
        compile_s=seconds,
        layers_counted=cost is not None,
        once_bytes=once[0] if once else 0.0,
        **hlo_facts(executables.text(job.key)),
    )


# libtpu's options for the counting compiles: no windowed einsum (a collective matmul's loop), so
# that every matmul's FLOPs count in full
COUNTING_OPTIONS = {"xla_jf_spmd_threshold_for_windowed_einsum_mib": 1 << 20}


def counted_cost(job: Job) -> tuple[float, float]:
    """(FLOPs, bytes accessed) per chip of `job`, compiled with `COUNTING_OPTIONS` on TPUs."""
    shardings = [getattr(x, "sharding", None) for x in jax.tree.leaves(job.args)]
    devices = {d.platform for s in shardings if s is not None for d in s.device_set}
    options = COUNTING_OPTIONS if devices == {"tpu"} else None
    executables = Executables("jaxeval-plan-count", compiler_options=options)
    executables.get(job)
    facts = executables.describe(job.key)
    return facts.get("flops", 0.0), facts.get("bytes_accessed", 0.0)


def first_layers(spec: Any, n: int) -> Any:
    """`spec` cut to its first `n` layers (run with `counting(runtime)` for exact costs)."""
    cut: dict[str, Any] = {
        "num_layers": n,
        "sliding_window": spec.sliding_window[:n],
        "attn_scale": spec.attn_scale[:n],
    }
    if spec.rope:
        cut["rope"] = spec.rope[:n]
    if spec.rope_layers:
        cut["rope_layers"] = spec.rope_layers[:n]
    return dataclasses.replace(spec, **cut)


def counting(runtime: Runtime) -> Runtime:
    """`runtime` with its layer scans unrolled: XLA's cost analysis then counts every layer."""
    return dataclasses.replace(runtime, unroll_layers=True)


def layer_period(spec: Any) -> int:
    """The smallest p such that the layers after the dense ones repeat every p layers (Gemma-2's
    alternating windows: 2)."""
    d, n = spec.dense_layers, spec.num_layers
    rows = list(zip(spec.sliding_window, spec.attn_scale, spec.rope_layers or [True] * n))[d:]
    for p in range(1, len(rows) + 1):
        if all(rows[i] == rows[i % p] for i in range(len(rows))):
            return p
    return len(rows)


def layer_costs(
    build: Callable, spec: Any, runtime: Runtime, mesh: Mesh, dtype: str
) -> tuple[float, float]:
    """(FLOPs, bytes) per chip of `build(spec, runtime, params)`'s executable, every layer counted.

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
    for k in points:
        cut = first_layers(spec, k)
        costs.append(
            counted_cost(build(cut, counting(runtime), sharded_abstract_params(cut, mesh, dtype)))
        )
    if len(costs) == 1:
        return costs[0]
    (fa, ba), (fb, bb) = costs
    scale = (n - a) / p
    return fa + scale * (fb - fa), ba + scale * (bb - ba)


def step_costs(
    steps: Callable, spec: Any, runtime: Runtime, mesh: Mesh, dtype: str
) -> tuple[float, float, float]:
    """(FLOPs, bytes) per chip of one step of a loop of steps, and the bytes moved once per call
    outside the loop (layout copies of the weights on entry, say).

    The cost analysis counts a loop's body once, on top of what runs before and after the loop.
    So `steps(n)` (the loop with n steps per iteration) is compiled for n = 1 and 2, every layer
    unrolled (a decode step's cost is not linear in a few layers: the compiler stages small caches
    through on-chip memory), and one step is the difference.
    """
    cut = first_layers(spec, spec.num_layers)
    params = sharded_abstract_params(cut, mesh, dtype)
    (f1, b1), (f2, b2) = (counted_cost(steps(n)(cut, counting(runtime), params)) for n in (1, 2))
    return f2 - f1, b2 - b1, max(0.0, b1 - (b2 - b1))

"""The expert matmul on a TPU slice, XLA's `ragged_dot` (jaxeval's grouped matmul) against Megablox
`gmm` (`jax.experimental.pallas.ops.tpu.megablox`), compiled by libtpu on this host.

    python bench/moe_grouped_matmul.py configs/models/qwen3-30b-a3b      # v5e-8, scoring T=2048

Compiles the scoring bucket T=2048 with the most score points' sibling (K=64) of the plan
(`jaxeval plan --topology v5e-8 --lengths 2048`) twice, once with each grouped matmul behind
`jaxeval.models.experts.ragged.ragged_matmul` (gmm with the largest of 512/256/128 that divides
each dimension as its tiles), and prints HBM and the compiler's estimate (its cycles plus the
kernels at the roofline of what they declare, `plan.costs`). Compiler figures, not measurements.
"""

from __future__ import annotations

import argparse

import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu.megablox import gmm

from jaxeval.models.experts import ragged as experts
from jaxeval.plan.compiled import plan_topology, read_config
from jaxeval.plan.topology import get_topology

RAGGED = experts.ragged_matmul


def _tile(size: int) -> int:
    return next((t for t in (512, 256, 128) if size % t == 0), size)


def gmm_matmul(h, w, sizes):
    """`experts.ragged_matmul` through Megablox gmm (float32 accumulation, h's dtype out)."""
    (m, k), n = h.shape, w.shape[-1]
    tiling = (_tile(m), _tile(k), _tile(n))
    y = gmm(h, w, sizes.astype(jnp.int32), preferred_element_type=jnp.float32, tiling=tiling)
    return y.astype(h.dtype)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a config directory, e.g. configs/models/qwen3-30b-a3b")
    p.add_argument("--topology", default="v5e-8")
    args = p.parse_args()
    topo = get_topology(args.topology)
    for name, matmul in (("ragged_dot", RAGGED), ("megablox gmm", gmm_matmul)):
        experts.ragged_matmul = matmul
        plan = plan_topology(
            read_config(args.model), args.topology, lengths=[2048], count_layers=False,
            keep=lambda job: job.kind == "score" and "K=64 " in job.name, cache=None,
        )  # fmt: skip
        for e in plan.executables:
            if e.error:
                print(f"{name}: {e.name}: {e.error[:300]}")
                continue
            total = e.estimate_s(topo)
            own = e.cycles / topo.chip.clock_hz
            mfu = e.useful_flops / (total * topo.chip.peak_flops)
            print(
                f"{name}: {e.name}: HBM {e.hbm_bytes / 2**30:.2f} GiB, estimate {total * 1e3:,.1f} ms"
                f" (compiler {own * 1e3:,.1f} + kernels {(total - own) * 1e3:,.1f}), {mfu:.0%} of peak"
            )
    experts.ragged_matmul = RAGGED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

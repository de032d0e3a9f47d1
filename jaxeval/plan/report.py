"""`TopologyPlan`: everything `jaxeval plan --topology` prints, as a table (docs/tpu.md is this
output), as JSON, and the advice when an executable does not compile or fit."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any

from jaxeval.plan.costs import GIB, Compiled
from jaxeval.plan.topology import Topology


def compiler_versions() -> str:
    """The TPU compiler and jax that compile the plan, as "libtpu 0.0.50.1, jax 0.12.0.1": the
    compiler's version changes its figures (its layout and fusion choices)."""

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return f"libtpu {version('libtpu')}, jax {version('jax')}"


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
    compiler: str = dataclasses.field(default_factory=compiler_versions)

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
            "compiler": self.compiler,
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
            + f", token budget {self.token_budget:,}; compiled by {self.compiler}",
            "",
            "| executable | HBM GiB / chip | GFLOP / chip | GB / chip | roofline ms | tokens/s |"
            " useful / compiled | MFU bound (roofline) | collectives | Pallas | CPU calls, host |",
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
                    f"{s['useful_over_compiled']:.0%} | {s['mfu_bound']:.0%}"
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

"""`TopologyPlan`: everything `jaxeval plan --topology` prints, as a table (docs/tpu.md is this
output), as JSON, and the advice when an executable does not compile or fit: one fix per kind of
failure (`FIXES`)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any

from jaxeval.plan.costs import GIB, Compiled
from jaxeval.plan.topology import Topology

# what to change, per failure (`Compiled.failure`) and per kind of executable
FIXES = {
    ("hbm", "params"): "more chips (a larger slice: they share the parameters) or a smaller dtype "
    "(dtype=bfloat16)",
    ("hbm", "score"): "a smaller token budget per scoring batch (--token_budget, now {budget:,})",
    ("hbm", "prefill"): "fewer generation rows (--gen_batch_size) or fewer KV-cache slots per row "
    "(--gen_slots)",
    ("compile", "any"): "another backend: --attention xla (or JAXEVAL_ATTENTION=xla; now "
    "{attention}) and, for a Mixture of Experts, JAXEVAL_MOE=blocked or ragged",
}
FIXES["hbm", "decode"] = FIXES["hbm", "prefill"]


def fix_for(failure: str, kind: str, *, budget: int = 0, attention: str = "auto") -> str:
    """The fix for a `failure` ("hbm" or "compile") of an executable of `kind` (`FIXES`)."""
    text = FIXES.get((failure, kind)) or FIXES["compile", "any"]
    return text.format(budget=budget, attention=attention)


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
        return self.param_bytes <= self.topology.chip.allowed_hbm_bytes

    @property
    def ok(self) -> bool:
        return self.params_fit and all(e.fits(self.topology) for e in self.executables)

    def _room(self) -> str:
        chip = self.topology.chip
        return (
            f"the compiler allows {chip.allowed_hbm_bytes / GIB:.2f} GiB per chip "
            f"(of {chip.hbm_bytes / GIB:.0f} GiB)"
        )

    def advice(self) -> str:
        """What to change when an executable does not compile or does not fit: per executable,
        what failed and the fix for that failure (`fix_for`)."""
        fix = {"budget": self.token_budget, "attention": self.attention}
        lines = []
        if not self.params_fit:
            lines.append(
                f"the parameters alone take {self.param_bytes / GIB:.2f} GiB per chip, "
                f"{self._room()}: nothing was compiled; fix: {fix_for('hbm', 'params', **fix)}"
            )
        for e in self.executables:
            failure = e.failure(self.topology)
            if failure is None:
                continue
            if e.error is not None and failure == "compile":
                what = f"does not compile: {e.error[:500]}"
            elif e.error is not None:
                what = f"out of HBM: {e.error[:300]}"
            else:
                what = f"needs {e.hbm_bytes / GIB:.2f} GiB per chip, {self._room()}"
            lines.append(f"{e.name}: {what}; fix: {fix_for(failure, e.kind, **fix)}")
        return "\n".join(lines)

    def _row(self, e: Compiled) -> dict[str, Any]:
        """`e.summary` with the fix for its failure (None when it fits)."""
        failure = e.failure(self.topology)
        fix = None
        if failure is not None:
            fix = fix_for(failure, e.kind, budget=self.token_budget, attention=self.attention)
        return {**e.summary(self.topology), "fix": fix}

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
            "allowed_hbm_bytes_per_chip": self.topology.chip.allowed_hbm_bytes,
            "token_budget": self.token_budget,
            "compiler": self.compiler,
            "executables": [self._row(e) for e in self.executables],
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
            f"{'s' if topo.hosts > 1 else ''}, {chip.hbm_bytes / GIB:.0f} GiB HBM per chip of "
            f"which the compiler allows {chip.allowed_hbm_bytes / GIB:.2f}), "
            f"mesh {mesh}, attention `{self.attention}`; parameters "
            f"{self.param_bytes / GIB:.2f} GiB per chip"
            + (" (**over**: nothing compiled)" if not self.params_fit else "")
            + f", token budget {self.token_budget:,}; compiled by {self.compiler}",
            "",
            "| executable | HBM GiB / chip | GFLOP / chip | GB / chip | roofline ms | tokens/s |"
            " useful / compiled | MFU bound (roofline) | compiler estimate ms |"
            " MFU (compiler estimate) | collectives | Pallas | CPU calls, host |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for e in self.executables:
            if e.error is not None:
                lines.append(f"| {e.name} | **does not compile**: {e.error[:300]} |" + " |" * 11)
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
            estimate = f"{s['estimate_s'] * 1e3:,.2f} | {s['mfu_estimate']:.0%}"
            one = "" if e.layers_counted else " (one layer)"
            why = one
            if e.count_error is not None:  # the reason, once, without the table's separator
                why = f" (one layer; counting failed: {e.count_error[:200].replace('|', '/')})"
            name = e.name + (f" (+{e.once_bytes / 1e9:,.2f} GB a call)" if e.once_bytes else "")
            lines.append(
                f"| {name} | {e.hbm_bytes / GIB:.2f}{fits} | {e.flops / 1e9:,.1f}{why} | "
                f"{e.bytes_accessed / 1e9:,.2f}{one} | {rates} | {estimate} | {coll} | "
                f"{e.pallas_kernels} | {e.cpu_custom_calls}, {e.host_transfers} |"
            )
        return "\n".join(lines)

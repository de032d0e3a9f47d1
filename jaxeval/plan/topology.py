"""TPU topologies to compile for on any host: named slices, their devices and their chips' figures.

    devices = topology_devices("v5e-8")        # 8 TPU v5e devices, from libtpu, on a CPU host
    mesh = Mesh(np.asarray(devices).reshape(1, 8, 1), MESH_AXES)
    jax.jit(f).lower(<ShapeDtypeStructs with NamedShardings on mesh>).compile()

`jax.experimental.topologies.get_topology_desc` describes a slice libtpu knows without one being
attached; executables compiled for its devices are real TPU programs (Mosaic kernels included)
whose `memory_analysis()` and `cost_analysis()` are the TPU compiler's. Only libtpu is needed
(`pip install "jax[tpu]"` at the installed jax version, or `pip install "jaxeval[tpu]"`); nothing
runs, so no TPU is needed.

Names follow Cloud TPU's accelerator types: the number after the dash counts TensorCores, so a v4-8
and a v5p-8 are 4 megacore chips on one host, a v5e-8 and a v6e-8 are 8 single-core chips on one
host; v5e-16, v6e-16 and larger span several hosts of 4 chips (as do v4/v5p slices past 4 chips). Chip figures are Google Cloud's published per-chip
specifications (bf16 peak, HBM capacity and bandwidth); the HBM the compiler allows a program and
the clock that turns its cycle estimates into seconds are libtpu's and derived (`CHIPS`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jaxeval.errors import JaxevalError
from jaxeval.platform.tpu_host import quiet_absent_tpu

INSTALL_HINT = 'install libtpu: pip install "jax[tpu]==<your jax version>" (or "jaxeval[tpu]")'


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chip:
    """One TPU chip: peak bf16 FLOP/s, HBM bytes (nominal, and what the compiler lets one program
    use), HBM bytes/s and the TensorCore clock in Hz (what turns the compiler's cycle estimates
    into seconds)."""

    name: str
    peak_flops: float
    hbm_bytes: int
    hbm_bandwidth: float
    allowed_hbm_bytes: int
    clock_hz: float


GIB = 1 << 30
# peak, HBM and bandwidth: Google Cloud's published per-chip specifications. allowed_hbm_bytes: the
# "available HBM" libtpu 0.0.42.1 states when a compile for the chip runs out of memory
# ("... exceeds available HBM (15.75G)"), to its two decimals of GiB. clock_hz: peak bf16 FLOP/s
# = TensorCores x MXUs x (MXU width)^2 x 2 x clock, with the MXUs libtpu reports
# (`pltpu.get_tpu_info()`: v5e 4 MXUs of 128 x 128), which gives v4's published 1,050 MHz (the
# TPU v4 paper, ISCA 2023), v5e 1.5 GHz, v5p 1.75 GHz, v6e (4 MXUs of 256 x 256) 1.75 GHz.
CHIPS = {
    "v4": Chip(
        name="TPU v4", peak_flops=275e12, hbm_bytes=32 * GIB, hbm_bandwidth=1.2e12,
        allowed_hbm_bytes=int(30.75 * GIB), clock_hz=1.05e9,
    ),
    "v5e": Chip(
        name="TPU v5e", peak_flops=197e12, hbm_bytes=16 * GIB, hbm_bandwidth=0.819e12,
        allowed_hbm_bytes=int(15.75 * GIB), clock_hz=1.5e9,
    ),
    "v5p": Chip(
        name="TPU v5p", peak_flops=459e12, hbm_bytes=95 * GIB, hbm_bandwidth=2.765e12,
        allowed_hbm_bytes=int(95.74 * GIB), clock_hz=1.75e9,
    ),
    "v6e": Chip(
        name="TPU v6e", peak_flops=918e12, hbm_bytes=32 * GIB, hbm_bandwidth=1.64e12,
        allowed_hbm_bytes=int(31.25 * GIB), clock_hz=1.75e9,
    ),
}  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class Topology:
    """A named slice: libtpu's topology name, chip config and chips per host; its chip's figures."""

    name: str
    generation: str  # a key of CHIPS
    topology_name: str
    chip_config: str  # "default" (one core per chip) or "megacore"
    chips: int
    chips_per_host_bounds: tuple[int, int, int] = (2, 2, 1)

    @property
    def chip(self) -> Chip:
        return CHIPS[self.generation]

    @property
    def hosts(self) -> int:
        per_host = self.chips_per_host_bounds[0] * self.chips_per_host_bounds[1]
        return max(1, self.chips // (per_host * self.chips_per_host_bounds[2]))


def _slices() -> dict[str, Topology]:
    out = {}
    for gen, kind, grids in (
        ("v5e", "default", {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 256: "16x16"}),
        ("v6e", "default", {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 256: "16x16"}),
        ("v4", "megacore", {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"}),
        ("v5p", "megacore", {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4"}),
    ):
        for chips, grid in grids.items():
            cores = chips * (2 if kind == "megacore" else 1)
            name = f"{gen}-{cores}"
            libtpu_gen = "v5" if gen == "v5p" else gen
            one_host = kind == "default" and chips == 8  # v5litepod-8 / v6e-8: 8 chips, 1 host
            out[name] = Topology(
                name=name,
                generation=gen,
                topology_name=f"{libtpu_gen}:{grid}",
                chip_config=kind,
                chips=chips,
                chips_per_host_bounds=(2, 4, 1) if one_host else (2, 2, 1),
            )
    return out


TOPOLOGIES = _slices()


def get_topology(name: str) -> Topology:
    """The named slice (`v5e-8`, `v4-8`, ...), or an error listing the known ones."""
    key = name.strip().lower()
    if key not in TOPOLOGIES:
        import difflib

        near = difflib.get_close_matches(key, TOPOLOGIES, n=3)
        raise JaxevalError(
            f"unknown TPU topology {name!r}",
            field="topology",
            hint=(f"did you mean {', '.join(near)}? " if near else "")
            + f"known: {', '.join(TOPOLOGIES)}",
        )
    return TOPOLOGIES[key]


def libtpu_available() -> bool:
    """Whether libtpu is installed (the compiler `topology_devices` needs)."""
    import importlib.util

    return importlib.util.find_spec("libtpu") is not None


def topology_devices(name: str) -> list[Any]:
    """The devices of the named slice, for a `Mesh` to compile on (module docstring). Needs libtpu;
    never needs a TPU. Sets libtpu's environment for a host without TPU metadata (a CPU host) when
    the caller has not."""
    topo = get_topology(name)
    if not libtpu_available():
        raise JaxevalError(
            f"compiling for {topo.name} needs libtpu, which is not installed", hint=INSTALL_HINT
        )
    quiet_absent_tpu()  # a CPU host: no libtpu start-up errors
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "true")
    from jax.experimental.topologies import get_topology_desc

    try:
        desc = get_topology_desc(
            platform="tpu",
            topology_name=topo.topology_name,
            chip_config_name=topo.chip_config,
            chips_per_host_bounds=topo.chips_per_host_bounds,
            num_slices=1,
        )
    except Exception as e:  # libtpu's own message, with what was asked
        raise JaxevalError(
            f"libtpu could not describe {topo.name} ({topo.topology_name}): {e}",
            field="topology",
            hint="check that libtpu matches the installed jax version; " + INSTALL_HINT,
        ) from e
    return list(desc.devices)

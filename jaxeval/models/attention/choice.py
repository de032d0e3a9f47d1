"""Which attention backend a model runs: chosen once per model, from the mesh and one setting.

    runtime = make_runtime(mesh, attention=None)    # select_attention(mesh, None) inside
    backend = select_attention(mesh, "auto")        # a frozen backend: static in every jit key

The setting: the `setting` argument (`--model_args attention=...`), else the environment variable
`JAXEVAL_ATTENTION`, else `auto`; `auto` takes `tpu` on a mesh of TPUs, `gpu` on a mesh of GPUs,
`cpu` when the mesh is one CPU device and a C++ compiler builds the kernels (a sharded step would
gather the kernel's operands), else `xla`. The platform is the mesh's, not the process's default
backend, so a model placed on a TPU topology from a CPU host (`jaxeval plan --topology`) gets the
real TPU kernels.

`JAXEVAL_CPU_ATTENTION=on|off|auto`, the older switch, is still read when `JAXEVAL_ATTENTION` is
unset (`on` forces `cpu`, `off` forces `xla`).
"""

from __future__ import annotations

import os

from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models.attention.backend import AttentionBackend
from jaxeval.models.attention.cpu import CPU
from jaxeval.models.attention.gpu import GpuAttention
from jaxeval.models.attention.tpu import TpuAttention
from jaxeval.models.attention.xla import XLA
from jaxeval.ops.attention import cpu as cpu_kernels

ENV = "JAXEVAL_ATTENTION"
SETTINGS = ("auto", "xla", "cpu", "tpu", "gpu")
CPU_ENV = "JAXEVAL_CPU_ATTENTION"  # the older switch
CPU_MODES = ("auto", "on", "off")
_LEGACY = {"on": "cpu", "off": "xla", "auto": "auto"}  # JAXEVAL_CPU_ATTENTION's values


def _cpu_mode() -> str:
    value = os.environ.get(CPU_ENV, "auto").strip().lower() or "auto"
    if value not in CPU_MODES:
        raise JaxevalError(f"{CPU_ENV}={value!r} is not one of {', '.join(CPU_MODES)}")
    return value


def requested(setting: str | None = None) -> str:
    """The setting in force: `setting`, else `JAXEVAL_ATTENTION`, else `JAXEVAL_CPU_ATTENTION`
    (mapped), else "auto"."""
    if setting is None:
        setting = os.environ.get(ENV)
        if setting is None and os.environ.get(CPU_ENV) is not None:
            setting = _LEGACY[_cpu_mode()]  # raises on an unknown value, naming the variable
    value = (setting or "auto").strip().lower()
    if value not in SETTINGS:
        raise JaxevalError(
            f"attention={value!r} is not one of {', '.join(SETTINGS)}",
            field="attention",
            hint=f"set --model_args attention=... or {ENV} to one of {', '.join(SETTINGS)}",
        )
    return value


def select_attention(mesh: Mesh | None, setting: str | None = None) -> AttentionBackend:
    """The backend for a model on `mesh` (module docstring). `cpu` asked for on a mesh that is not
    on the CPU, or without a compiler to build the kernels, is an error naming the fix."""
    value = requested(setting)
    devices = list(mesh.devices.flat) if mesh is not None else []
    platforms = {d.platform for d in devices}
    on_cpu = bool(devices) and platforms == {"cpu"}
    if value == "auto":
        if platforms == {"tpu"}:
            value = "tpu"
        elif platforms == {"gpu"} or platforms == {"cuda"} or platforms == {"rocm"}:
            value = "gpu"
        elif on_cpu and len(devices) == 1 and cpu_kernels.available():
            value = "cpu"
        else:
            value = "xla"
    if value == "xla":
        return XLA
    if value == "tpu":
        return TpuAttention(interpret=platforms != {"tpu"})
    if value == "gpu":
        return GpuAttention(implementation=None if platforms - {"cpu"} else "xla")
    if not on_cpu:
        raise JaxevalError(
            f"attention=cpu needs a mesh of CPU devices, this one is on {', '.join(sorted(platforms))}",
            field="attention",
            hint="use attention=auto (or xla)",
        )
    if not cpu_kernels.available():
        raise JaxevalError(
            f"attention=cpu but the CPU attention kernels could not be built: "
            f"{cpu_kernels.build_error()}",
            field="attention",
            hint="install a C++ compiler (or set CXX), or use attention=auto to fall back to XLA",
        )
    return CPU

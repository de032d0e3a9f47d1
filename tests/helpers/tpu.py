"""TPU meshes to compile for on this CPU host (`jaxeval.plan.topology`): libtpu is a test dependency.

mesh = tpu_mesh("v5e-8", model=1)          # Mesh of 8 TPU v5e devices, axes (data, fsdp, model)
compiled = jax.jit(f).lower(*abstract_args_on(mesh)).compile()
assert "tpu_custom_call" in compiled.as_text()
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

from jaxeval.plan.topology import topology_devices
from jaxeval.platform.mesh import MESH_AXES


def tpu_mesh(name: str = "v5e-8", *, data: int = 1, model: int = 1) -> Mesh:
    """A (data, fsdp, model) mesh on the named slice's devices; fsdp takes what is left."""
    devices = topology_devices(name)
    fsdp = len(devices) // (data * model)
    return Mesh(np.asarray(devices, dtype=object).reshape(data, fsdp, model), MESH_AXES)


def single_tpu_mesh(name: str = "v5e-8") -> Mesh:
    """One TPU device of the named slice, as a (1, 1, 1) mesh."""
    return Mesh(np.asarray(topology_devices(name)[:1], dtype=object).reshape(1, 1, 1), MESH_AXES)


def compile_text(fn, *args, **jit_kwargs) -> str:
    """The optimized HLO of `fn` compiled for the devices its abstract `args` are sharded on."""
    return jax.jit(fn, **jit_kwargs).lower(*args).compile().as_text()

"""Device meshes from named presets, and the sharding of batches. Built once at the entry point.

Every mesh has the axes `("data", "fsdp", "model")` (size 1 when unused), so the parameter rule table
(`jaxeval.models.sharding`) and the batch rule below can always name them. Presets live in
`configs/meshes.yaml`; `-1` means "all remaining devices":

    make_mesh("single")                      {data: 1, fsdp: 1, model: 1} on the first device
    make_mesh("data")          (8 devices)   {data: 8, fsdp: 1, model: 1}
    make_mesh("data_model")    (8 devices)   {data: 2, fsdp: 1, model: 4}
    make_mesh("data_model", model=2)         {data: 4, fsdp: 1, model: 2}

Batches `[B, ...]` split B over data and fsdp together, replicated if B does not divide: this module
owns that rule (`batch_axes`, `batch_shards`, `rows_axis`, `batch_sharding`, `constrain_rows`) and
scoring, generation, the KV cache and the kernels import it. No global mesh is ever set: pass the
Mesh down explicitly.

With several processes (`jaxeval.platform.distributed`) the mesh spans the devices of all of them. Every
process holds the same host batch; `put_global` makes the global array from it, each process
materializing only the shards of its own devices; `to_host` reads small outputs back.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import yaml
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from jaxeval.errors import JaxevalError
from jaxeval.platform import phases

MESH_AXES = ("data", "fsdp", "model")
BATCH_AXES = ("data", "fsdp")
_PRESETS_FILE = "meshes.yaml"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshPreset:
    """Axis sizes of one preset; -1 on at most one axis takes the remaining devices."""

    data: int = 1
    fsdp: int = 1
    model: int = 1

    def __post_init__(self):
        sizes = self.sizes()
        if sum(s == -1 for s in sizes) > 1:
            raise JaxevalError(f"mesh preset {self}: only one axis may be -1")
        if any(s == 0 or s < -1 for s in sizes):
            raise JaxevalError(f"mesh preset {self}: axis sizes must be positive or -1")

    def sizes(self) -> tuple[int, int, int]:
        return (self.data, self.fsdp, self.model)

    def resolve(self, n_devices: int) -> tuple[int, int, int]:
        """Concrete sizes for `n_devices` (the product must equal it)."""
        fixed = math.prod(s for s in self.sizes() if s != -1)
        if -1 in self.sizes():
            if n_devices % fixed:
                raise JaxevalError(
                    f"mesh {self} needs a multiple of {fixed} devices, found {n_devices}",
                    hint="pick another preset or override the axis sizes",
                )
            return tuple(n_devices // fixed if s == -1 else s for s in self.sizes())  # type: ignore[return-value]
        if fixed != n_devices:
            raise JaxevalError(f"mesh {self} uses {fixed} devices but {n_devices} were given")
        return self.sizes()


def _presets_path() -> pathlib.Path:
    package = pathlib.Path(__file__).resolve().parents[1]  # jaxeval/ (installed: configs inside)
    for candidate in (
        package / "configs" / _PRESETS_FILE,
        package.parent / "configs" / _PRESETS_FILE,
    ):
        if candidate.is_file():
            return candidate
    raise JaxevalError(f"mesh presets file {_PRESETS_FILE} not found next to the jaxeval package")


def load_presets(path: str | pathlib.Path | None = None) -> dict[str, MeshPreset]:
    """Parses the presets YAML into MeshPresets (unknown keys are an error naming file and key)."""
    path = pathlib.Path(path) if path is not None else _presets_path()
    with open(path) as f:
        raw = yaml.safe_load(f) or {}
    out = {}
    for name, sizes in raw.items():
        unknown = sorted(set(sizes) - set(MESH_AXES))
        if unknown:
            raise JaxevalError(
                f"unknown mesh axis {unknown[0]!r} in preset {name!r}",
                file=str(path),
                field=unknown[0],
                hint=f"mesh axes are {', '.join(MESH_AXES)}",
            )
        out[name] = MeshPreset(**sizes)
    return out


def make_mesh(
    preset: str = "single",
    *,
    devices: Sequence[Any] | None = None,
    presets_path: str | pathlib.Path | None = None,
    **sizes: int,
) -> Mesh:
    """A Mesh with axes (data, fsdp, model) from a preset; keyword sizes override the preset's
    (a TPU slice's devices from `jaxeval.plan.topology` make a mesh for a machine this is not)."""
    chosen = _preset(preset, presets_path, sizes)
    devices = list(jax.devices() if devices is None else devices)
    if chosen.sizes() == (1, 1, 1):
        devices = devices[:1]
    shape = chosen.resolve(len(devices))
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), MESH_AXES)


def make_abstract_mesh(preset: str, devices: int, **sizes: int) -> AbstractMesh:
    """`make_mesh`'s shape for `devices` devices as an `AbstractMesh` (no devices: sharding rules
    and shapes only, as `jaxeval plan` sizes a mesh it does not have)."""
    shape = _preset(preset, None, sizes).resolve(int(devices))
    return AbstractMesh(tuple(int(s) for s in shape), MESH_AXES)


def _preset(preset: str, presets_path: Any, sizes: dict[str, int]) -> MeshPreset:
    presets = load_presets(presets_path)
    if preset not in presets:
        raise JaxevalError(
            f"unknown mesh preset {preset!r}",
            field="mesh",
            hint=f"use one of {', '.join(presets)}",
        )
    unknown = sorted(set(sizes) - set(MESH_AXES))
    if unknown:
        raise JaxevalError(
            f"unknown mesh axis {unknown[0]!r}; mesh axes are {', '.join(MESH_AXES)}"
        )
    return dataclasses.replace(presets[preset], **sizes)


def single_device_mesh(device: Any | None = None) -> Mesh:
    """A 1-device mesh with the standard axis names (what `load_model` uses without a mesh)."""
    device = jax.devices()[0] if device is None else device
    return Mesh(np.asarray([device], dtype=object).reshape(1, 1, 1), MESH_AXES)


def batch_axes(mesh: Mesh) -> tuple[str, ...]:
    """The mesh axes a batch dimension is split over: data and fsdp, those present with size > 1."""
    return tuple(a for a in BATCH_AXES if a in mesh.shape and mesh.shape[a] > 1)


def batch_shards(mesh: Mesh) -> int:
    """How many ways a batch's rows are split: every planned batch has a multiple of this many rows."""
    return math.prod(mesh.shape[a] for a in batch_axes(mesh))


def batch_entry(mesh: Mesh) -> str | tuple[str, ...] | None:
    """The PartitionSpec entry of a dimension split over all the batch axes (None: none)."""
    axes = batch_axes(mesh)
    return None if not axes else axes if len(axes) > 1 else axes[0]


def rows_axis(mesh: Mesh, n_rows: int) -> str | tuple[str, ...] | None:
    """The PartitionSpec entry of a dimension of `n_rows` batch rows: the batch axes when the rows
    divide evenly over them, else None (replicated)."""
    return None if n_rows % batch_shards(mesh) else batch_entry(mesh)


def batch_sharding(mesh: Mesh, shape: Sequence[int], row_dim: int = 0) -> NamedSharding:
    """NamedSharding for an array whose dimension `row_dim` holds batch rows: that dimension over
    (data, fsdp), the rest replicated; fully replicated when the rows do not divide evenly.

    This is the batch rule of the whole package: scoring batches, generation batches, KV caches
    (`jaxeval.models.sharding.cache_shardings`) and the kernels' sharding constraints use it.
    """
    spec: list[Any] = [None] * len(shape)
    spec[row_dim] = rows_axis(mesh, shape[row_dim])
    return NamedSharding(mesh, PartitionSpec(*spec))


def batch_shardings(mesh: Mesh, tree: Any) -> Any:
    """`batch_sharding` for every array of a host batch pytree (rows first in each)."""
    return jax.tree.map(lambda x: batch_sharding(mesh, np.shape(x)), tree)


def constrain_rows(x: jax.Array, mesh: Mesh | None, row_dim: int = 0) -> jax.Array:
    """Inside a jitted kernel: pins dimension `row_dim` of `x` to the batch rule (no-op without a
    mesh or when the rows do not split)."""
    if mesh is None or rows_axis(mesh, x.shape[row_dim]) is None:
        return x
    return jax.lax.with_sharding_constraint(x, batch_sharding(mesh, x.shape, row_dim))


def constrain_to(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """Inside a jitted kernel: pins `x` to `sharding` (a layout another rule chose: a KV cache
    whose slots split over the batch axes, `models.attention.slots`)."""
    return jax.lax.with_sharding_constraint(x, sharding)


def fsdp_splits(mesh: Mesh | None) -> bool:
    """Whether `mesh` shards parameters over an `fsdp` axis of more than one device."""
    return mesh is not None and mesh.shape.get("fsdp", 1) > 1


def constrain_rows_on_data(x: jax.Array, mesh: Mesh | None, row_dim: int = 0) -> jax.Array:
    """Inside a jitted kernel: pins dimension `row_dim` of `x` to the `data` axis alone (when the
    rows divide over it), every other dimension and axis replicated: the fsdp shards then keep
    their weights and reduce the activations instead (`decoder.weights_stay`). No-op without a
    mesh."""
    if mesh is None:
        return x
    spec: list[Any] = [None] * x.ndim
    data = mesh.shape.get("data", 1)
    if data > 1 and x.shape[row_dim] % data == 0:
        spec[row_dim] = "data"
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))


def replicated(mesh: Mesh) -> NamedSharding:
    """Fully replicated sharding (small outputs, scalars)."""
    return NamedSharding(mesh, PartitionSpec())


def spans_all_processes(mesh: Mesh) -> bool:
    """Whether every process owns at least one device of `mesh` (needed to run SPMD on it)."""
    owners = {d.process_index for d in mesh.devices.flat}
    return owners == set(range(jax.process_count()))


def local_device(mesh: Mesh) -> Any:
    """The first device of `mesh` that this process can address."""
    for d in mesh.devices.flat:
        if d.process_index == jax.process_index():
            return d
    raise JaxevalError(
        f"process {jax.process_index()} owns no device of the mesh {dict(mesh.shape)}"
    )


def put_global(tree: Any, shardings: Any) -> Any:
    """Host arrays (the same on every process) -> jax.Arrays on `shardings` (a pytree or one).

    One process: `jax.device_put`. Several: `jax.make_array_from_callback`, so each process builds
    only the shards of its own devices from its copy of the batch (rows 2-3 of 8 on a process
    owning the second of four data shards); no data crosses processes and no collective runs.
    """
    if isinstance(shardings, NamedSharding):
        shardings = jax.tree.map(lambda _: shardings, tree)
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def put(x: Any, sharding: NamedSharding) -> jax.Array:
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree, shardings)


def call_args(tree: Any, shardings: Any) -> Any:
    """Host arrays (the same on every process) as arguments of a compiled call whose inputs have
    `shardings`. One process: the host arrays themselves, which the call places on its own input
    shardings in one step (a 13-array admission batch: ~0.1 ms, against ~0.5 ms through
    `jax.device_put` first); several: `put_global`."""
    if jax.process_count() == 1:
        return tree
    return put_global(tree, shardings)


def place_params(params: Any, mesh: Mesh) -> Any:
    """Keeps arrays already sharded on `mesh`; replicates anything else (host arrays, other devices).

    Abstract parameters (`jax.ShapeDtypeStruct`s, for compiling only) keep a `NamedSharding` on
    `mesh` and are otherwise given the replicated one; nothing is allocated for them.
    """
    full = replicated(mesh)

    def place(x):
        on_mesh = (
            isinstance(getattr(x, "sharding", None), NamedSharding) and x.sharding.mesh == mesh
        )
        if isinstance(x, jax.ShapeDtypeStruct):
            return x if on_mesh else jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=full)
        if isinstance(x, jax.Array) and on_mesh:
            return x
        if jax.process_count() > 1:  # through the host: each process places its own replicas
            return put_global(to_host(x), full)
        return jax.device_put(x, full)

    return jax.tree.map(place, params)


def to_host(tree: Any) -> Any:
    """jax.Arrays -> numpy on every process: replicated outputs are read locally, others gathered.
    The wait counts as the run's `device` phase (`jaxeval.platform.phases`)."""
    with phases.phase("device"):
        return _to_host(tree)


def _to_host(tree: Any) -> Any:
    if jax.process_count() == 1:
        return jax.device_get(tree)

    def get(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
            return jax.device_get(x)
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)

"""`select_experts`: the expert backend of a model, chosen once like `attention.select_attention`.

    ragged   `RaggedExperts`: `jax.lax.ragged_dot`, native on XLA:TPU
    blocked  `BlockedExperts`: blocks of one expert's rows (CPU, GPU: there `ragged_dot` is
             expanded into a dense computation over all X experts)
    auto     ragged on TPU, blocked elsewhere

The setting is `--model_args experts=`, else `JAXEVAL_MOE`, else auto. On a mesh of several devices
the backend runs under expert parallelism (`ExpertParallel`): each device holds X/n experts and
runs them on every token routed to them; expert weights are never gathered.
"""

from __future__ import annotations

import os

import jax
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models.experts.backend import ExpertBackend
from jaxeval.models.experts.blocked import BlockedExperts
from jaxeval.models.experts.parallel import ExpertParallel
from jaxeval.models.experts.ragged import RaggedExperts
from jaxeval.models.experts.reference import DenseExperts

ENV = "JAXEVAL_MOE"
SETTINGS = ("auto", "ragged", "blocked")
DENSE = DenseExperts()
RAGGED = RaggedExperts()
BLOCKED = BlockedExperts()


def _requested(setting: str | None = None) -> str:
    """The setting in force: `setting`, else `JAXEVAL_MOE`, else "auto"."""
    value = (setting if setting is not None else os.environ.get(ENV) or "auto").strip().lower()
    if value not in SETTINGS:
        raise JaxevalError(
            f"experts={value!r} is not one of {', '.join(SETTINGS)}",
            field="experts",
            hint=f"set --model_args experts=... or {ENV} to auto, ragged or blocked",
        )
    return value


def select_experts(
    platform_or_mesh: str | Mesh | None, setting: str | None = None
) -> ExpertBackend:
    """The expert backend for a model on a platform ("cpu", "gpu", "tpu"), a mesh's devices or,
    for None, JAX's default backend: `setting`, else `JAXEVAL_MOE`, else auto = ragged on TPU
    and blocked elsewhere (module docstring); on a mesh of several devices that backend under
    expert parallelism (`ExpertParallel`: each device runs its own experts)."""
    value = _requested(setting)
    if isinstance(platform_or_mesh, Mesh):
        platforms = {d.platform for d in platform_or_mesh.devices.flat}
    else:
        platforms = {platform_or_mesh or jax.default_backend()}
    if value == "auto":
        value = "ragged" if platforms == {"tpu"} else "blocked"
    backend = RAGGED if value == "ragged" else BLOCKED
    if isinstance(platform_or_mesh, Mesh) and platform_or_mesh.devices.size > 1:
        return ExpertParallel(inner=backend, dense=DENSE)
    return backend

"""`jaxeval plan`: memory per device for a model on a mesh, from config.json alone (no weights read).

    jaxeval plan --model_args pretrained=configs/models/llama-3-8b --mesh fsdp --devices 8

With `--topology v5e-8` (v4-8, v5p-8, v6e-8, v5e-16, ...) it compiles every executable of a run for
that TPU slice instead, on this host, and reports the compiler's figures (`jaxeval.plan.compiled`).

Nothing is guessed from a parameter count; every number is a shape times a dtype, per device:

* **parameters**: `spec.abstract_params(dtype)` (`jax.ShapeDtypeStruct`s) under the PartitionSpecs
  that `jaxeval.models.param_shardings` (the `LOGICAL_AXIS_RULES` table) gives on an abstract mesh
  of the requested size (`jax.sharding.AbstractMesh`: no devices needed), each leaf's shard shape
  = global shape divided by the mesh axes on its dimensions.
* **scoring activations**: one batch of the token budget (B rows x T tokens, rows split over the
  batch axes data and fsdp) at its widest point, one layer body: the residual stream [B, T, D]
  (shape from `jax.eval_shape(spec.hidden, ...)`), q, k, v, the attention scores [B, H, T, J]
  in float32 (J = T below 512 keys, else the attention block), the MLP's [B, T, F] inputs, and the
  head's [P, Vc] float32 logits block of the scoring kernel (`kernels.score.fast_vocab_chunk`).
  Heads and the MLP width divide over `model` when the rule table splits them.
  A Mixture of Experts counts, per token, its K routed copies and their expert activations
  (every expert's weights are resident: they are in the parameters; per device under expert
  parallelism, whole experts over `model`, or tensor parallelism, each expert's width split).
* **generation KV cache**: `jax.eval_shape(spec.init_cache, rows, max_length)` under
  `cache_shardings` (rows over the batch axes, KV heads over `model`).

XLA's own buffers, fragmentation and the compiled code are not counted: keep ~10-20 % headroom.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import jax
import numpy as np
from jax.sharding import AbstractMesh, PartitionSpec

from jaxeval.errors import JaxevalError
from jaxeval.kernels.score import fast_vocab_chunk
from jaxeval.lm.args import parse_model_args
from jaxeval.lm.model_config import MAX_BATCH_SIZE
from jaxeval.lm.score.budget import run_token_budget
from jaxeval.models.decoder import attention_block_size
from jaxeval.models.families import spec_from_config
from jaxeval.models.loader import read_hf_config
from jaxeval.models.sharding import (
    cache_shardings,
    entry_ways,
    logical_sharding,
    param_shardings,
    split_ways,
)
from jaxeval.platform.mesh import batch_shards, make_abstract_mesh

GIB = 1 << 30
DEFAULT_GEN_ROWS = 64  # generation rows a plan asks for when none are given
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """Bytes per device (the most loaded device) for one model, mesh and set of shapes."""

    model_type: str
    parameters: int  # parameter count
    active_parameters: int  # per token: the Mixture of Experts' routed experts counted K of X
    mesh: dict[str, int]
    dtype: str
    param_bytes: int  # per device
    score_rows: int  # B of one scoring batch (all devices)
    score_length: int  # T
    activation_bytes: int  # per device, one scoring batch's widest layer
    gen_rows: int
    gen_length: int  # KV-cache slots per row (max_length)
    kv_bytes: int  # per device

    @property
    def total_bytes(self) -> int:
        """Parameters plus the larger of the scoring and generation working sets."""
        return self.param_bytes + max(self.activation_bytes, self.kv_bytes)

    def table(self, device_memory_gib: float | None = None) -> str:
        def gib(n: int) -> str:
            return f"{n / GIB:.2f} GiB"

        mesh = " x ".join(f"{k}={v}" for k, v in self.mesh.items())
        lines = [
            f"model: {self.model_type}, {self.parameters / 1e9:.2f} B parameters in {self.dtype}"
            + (
                f" ({self.active_parameters / 1e9:.2f} B active per token)"
                if self.active_parameters != self.parameters
                else ""
            ),
            f"mesh: {mesh} ({math.prod(self.mesh.values())} devices)",
            "per device:",
            f"  parameters                       {gib(self.param_bytes)}",
            f"  scoring activations  {self.score_rows} x {self.score_length} tokens"
            f"{'':>4}{gib(self.activation_bytes)}",
            f"  generation KV cache  {self.gen_rows} x {self.gen_length} slots"
            f"{'':>4}{gib(self.kv_bytes)}",
            f"  total (parameters + larger of the two)   {gib(self.total_bytes)}",
        ]
        if device_memory_gib:
            free = device_memory_gib * GIB - self.total_bytes
            verdict = "fits" if free >= 0.1 * device_memory_gib * GIB else "does NOT fit"
            lines.append(
                f"  device memory {device_memory_gib:g} GiB: {verdict} ({free / GIB:+.2f} GiB left)"
            )
        return "\n".join(lines)


def expert_width_ways(mesh: Any, spec: Any) -> int:
    """How many ways an expert's hidden width splits, as the rule table lays out the stacked
    gate [X, D, Fx]: none when the experts dimension takes the model axis (expert parallelism),
    else `expert_mlp`'s axis."""
    m = spec.moe
    axes = ("experts", "embed", "expert_mlp")
    sharding = logical_sharding(mesh, axes, (m.num_experts, spec.hidden_size, m.expert_size))
    return entry_ways(mesh, sharding.spec[2])


def shard_bytes(shape: tuple[int, ...], spec: PartitionSpec, mesh: Any, itemsize: int) -> int:
    """Bytes of one device's shard of an array of `shape` under `spec` (ceil division per dim)."""
    out = itemsize
    for i, size in enumerate(shape):
        axes = spec[i] if i < len(spec) else None
        axes = () if axes is None else (axes if isinstance(axes, tuple) else (axes,))
        ways = math.prod(mesh.shape[a] for a in axes)
        out *= -(-size // ways)
    return int(out)


def read_config(path: str) -> Any:
    """The transformers config of a directory holding config.json (weights are never opened)."""
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise JaxevalError(
            "no config.json in the directory",
            file=path,
            field="pretrained",
            hint="give a directory holding the model's config.json (weights are not needed)",
        )
    # a corrupt config.json, or sizes past any model's (`models.weights.bounds`), is a named error
    return read_hf_config(path)


def plan_memory(
    config: Any,
    mesh: AbstractMesh,
    *,
    dtype: str = "bfloat16",
    max_length: int | None = None,
    token_budget: int | None = None,
    gen_rows: int = 64,
    device_bytes: int | None = None,
) -> MemoryPlan:
    """The per-device memory of `config` on `mesh` (module docstring). The scoring batch holds
    `token_budget` tokens, by default the run's own rule (`budget.run_token_budget`) on devices of
    `device_bytes` bytes, less the parameters (None: the CPU's rule, as a run on this host)."""
    if dtype not in BYTES:
        raise JaxevalError(f"unknown dtype {dtype!r}", field="dtype", hint=f"one of {list(BYTES)}")
    spec = spec_from_config(config, compute_dtype=dtype)
    item = BYTES[dtype]
    max_length = int(max_length or spec.max_position_embeddings)
    shards = batch_shards(mesh)  # the batch rule (an AbstractMesh has the same .shape)

    # parameters: abstract leaves x the rule table's PartitionSpecs
    abstract = spec.abstract_params(dtype)
    shardings = param_shardings(spec, mesh)
    leaves = jax.tree.leaves(abstract)
    specs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    param_bytes = sum(shard_bytes(x.shape, s.spec, mesh, item) for x, s in zip(leaves, specs))
    free = None if device_bytes is None else max(0, device_bytes - param_bytes)
    budget = int(token_budget or run_token_budget(spec, free, shards, max_length, MAX_BATCH_SIZE))

    # scoring: one batch of the budget, rows over the batch axes
    length = min(max_length, budget)
    rows = max(shards, budget // length // shards * shards)
    tokens = jax.ShapeDtypeStruct((rows, length), np.int32)
    x = jax.eval_shape(spec.hidden, abstract, tokens, tokens, tokens, tokens)  # [B, T, D]
    local_rows = -(-rows // shards)
    # per device, as the rule table splits them
    heads = spec.num_heads // split_ways(mesh, "heads", spec.num_heads)
    kv = spec.num_kv_heads // split_ways(mesh, "kv_heads", spec.num_kv_heads)
    width = spec.intermediate_size // split_ways(mesh, "mlp", spec.intermediate_size)
    keys = attention_block_size(length) or length  # the reference runtime's blocks
    ffn = (2 if spec.mlp == "gated" else 1) * width * item  # MLP [T, F] (gate, up)
    if spec.moe is not None:  # per token: its Kx gathered copies and outputs [Kx, D], their
        # gate/up [Kx, 2*Fx] (Fx over `model` when split), the router's float32 scores [Nx] and
        # the shared experts' [2*Fs]; the dense first layers' MLP if it is wider
        m = spec.moe
        expert = m.expert_size // expert_width_ways(mesh, spec)
        experts = m.top_k * (2 * spec.hidden_size + 2 * expert) * item + m.num_experts * 4
        experts += 2 * m.shared_size * item
        ffn = max(experts, ffn if spec.dense_layers else 0)
    per_row = (
        x.shape[2] * item * 2  # residual stream and the normed copy [T, D]
        + (heads + 2 * kv) * spec.head_dim * item  # q, k, v
        + heads * keys * 4  # scores, float32, per query token: [H, J]
        + ffn
    )
    points = local_rows * length
    head_block = points * fast_vocab_chunk(points, spec.vocab_size) * 4  # [P, Vc] float32
    activation_bytes = local_rows * length * per_row + head_block

    # generation: the KV cache of gen_rows x max_length slots
    cache = jax.eval_shape(lambda: spec.init_cache(gen_rows, max_length, dtype))
    cache_specs = cache_shardings(spec, mesh, gen_rows, max_length)
    kv_bytes = sum(
        shard_bytes(a.shape, s.spec, mesh, np.dtype(a.dtype).itemsize)
        for a, s in zip(cache, cache_specs)
    )
    return MemoryPlan(
        model_type=spec.model_type,
        parameters=spec.param_count(),
        active_parameters=spec.active_param_count(),
        mesh=dict(mesh.shape),
        dtype=dtype,
        param_bytes=int(param_bytes),
        score_rows=rows,
        score_length=length,
        activation_bytes=int(activation_bytes),
        gen_rows=gen_rows,
        gen_length=max_length,
        kv_bytes=int(kv_bytes),
    )


def plan_json(plan: MemoryPlan) -> str:
    return json.dumps({**dataclasses.asdict(plan), "total_bytes": plan.total_bytes}, indent=2)


def plan_model_args(text: str) -> dict[str, Any]:
    """`--model_args` of `jaxeval plan`: pretrained (a folder with config.json), dtype, max_length."""
    model_args = parse_model_args(text)
    unknown = sorted(set(model_args) - {"pretrained", "dtype", "max_length"})
    if unknown or "pretrained" not in model_args:
        raise JaxevalError(
            f"plan reads pretrained, dtype and max_length from --model_args, got {sorted(model_args)}",
            field="model_args",
            hint="e.g. --model_args pretrained=configs/models/llama-3-8b,dtype=bfloat16",
        )
    return model_args


def print_memory_plan(
    model_args: dict[str, Any],
    *,
    preset: str = "fsdp",
    devices: int | None = None,
    token_budget: int | None = None,
    gen_rows: int = 64,
    device_memory: float | None = None,
    as_json: bool = False,
) -> int:
    """`jaxeval plan` without `--topology`: prints the plan of `model_args` (`plan_model_args`) on
    `devices` (default: this host's) under the mesh `preset`, as a table (checked against
    `device_memory` GiB when given) or JSON; the exit status, 0."""
    devices = devices or len(jax.devices())
    plan = plan_memory(
        read_config(str(model_args["pretrained"])),
        make_abstract_mesh(preset, devices),
        dtype=str(model_args.get("dtype", "bfloat16")),
        max_length=int(model_args["max_length"]) if "max_length" in model_args else None,
        token_budget=token_budget,
        gen_rows=gen_rows,
        device_bytes=None if device_memory is None else int(device_memory * GIB),
    )
    print(plan_json(plan) if as_json else plan.table(device_memory))
    return 0

"""Expert parallelism (`jaxeval.models.experts.parallel`) on the 8 fake CPU devices: each device runs
its own experts, the results are the single-device ones.

Meshes: fsdp (8 experts over 8 devices: the rows gathered and reduce-scattered, or round the
ring), data_model (data 2, model 4: every row on the model devices, a psum) and fsdp 2 x model 4
(both).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np
import pytest
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

from jaxeval.models import experts as E
from jaxeval.models import experts as M
from jaxeval.models.experts import ExpertParallel, expert_axes, local_ids
from jaxeval.models.param_info import is_info
from jaxeval.models.runtime import make_runtime
from jaxeval.models.sharding import logical_sharding, split_ways
from jaxeval.platform.mesh import batch_sharding, make_mesh
from tests.helpers.tiny_models import MOE_FAMILIES

MESHES = {  # name -> (preset, sizes)
    "fsdp": ("fsdp", {}),
    "data_model": ("data_model", {}),
    "fsdp_model": ("fsdp", {"model": 4}),
}


@pytest.fixture
def eight():
    if len(jax.devices()) < 8:
        pytest.skip("needs the 8 fake CPU devices from tests/conftest.py")


def _abstract(data: int, fsdp: int, model: int) -> AbstractMesh:
    return AbstractMesh((data, fsdp, model), ("data", "fsdp", "model"))


def test_expert_axes_rule():
    """The docstring's cases, and the rule table agrees with it."""
    assert expert_axes(_abstract(1, 2, 4), 8) == ("fsdp", "model")
    assert expert_axes(_abstract(1, 2, 4), 4) == ("model",)
    assert expert_axes(_abstract(2, 1, 4), 6) == ()
    assert expert_axes(_abstract(1, 8, 1), 128) == ("fsdp",)
    assert expert_axes(_abstract(8, 1, 1), 128) == ()  # data parallel: weights replicated
    assert expert_axes(_abstract(1, 2, 4), 8, used=("fsdp",)) == ("model",)
    mesh = _abstract(1, 2, 4)
    gate = logical_sharding(mesh, ("layers", "experts", "embed", "expert_mlp"), (3, 8, 16, 32))
    assert gate.spec == PartitionSpec(None, ("fsdp", "model"), None, None)
    router = logical_sharding(mesh, ("embed", "experts"), (16, 8))  # fsdp taken by embed
    assert router.spec == PartitionSpec("fsdp", "model")
    assert split_ways(mesh, "experts", 8) == 8 and split_ways(mesh, "experts", 6) == 2
    assert split_ways(mesh, "experts", 5) == 1


def test_local_ids_docstring_example():
    experts = np.array([[0, 3], [1, 2], [3, 1]], np.int32)
    assert local_ids(experts, 0, 2).tolist() == [[0, 2], [1, 2], [2, 1]]
    assert local_ids(experts, 2, 2).tolist() == [[2, 1], [2, 0], [1, 2]]


def test_select_experts_wraps_on_several_devices(eight, monkeypatch):
    monkeypatch.delenv(E.ENV, raising=False)
    mesh = make_mesh("fsdp")
    backend = E.select_experts(mesh)
    assert backend == ExpertParallel(inner=E.BLOCKED, dense=E.DENSE)
    assert backend.name == "blocked"
    assert E.select_experts(mesh, "ragged").inner is E.RAGGED
    assert E.select_experts(make_mesh("single")) is E.BLOCKED  # one device: as before
    assert make_runtime(mesh).experts == backend


def _random_params(moe: M.MoESpec, d: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda i: (0.2 * rng.standard_normal(i.shape[1:])).astype(np.float32),
        M.moe_param_layout(moe, d, 1),
        is_leaf=is_info,
    )


def _placed(p: dict, moe: M.MoESpec, d: int, mesh) -> dict:
    """One layer's parameters on `mesh` as the rule table puts them (the L axis dropped)."""
    layout = M.moe_param_layout(moe, d, 1)
    return jax.tree.map(
        lambda a, i: jax.device_put(
            a, NamedSharding(mesh, PartitionSpec(*logical_sharding(mesh, i.axes, i.shape).spec[1:]))
        ),
        p,
        layout,
        is_leaf=is_info,
    )


@functools.partial(jax.jit, static_argnames=("moe", "backend", "mesh"))
def _block(p, x, *, moe, backend, mesh=None):
    return M.moe_block(p, x, moe=moe, backend=backend, mesh=mesh)


@pytest.mark.parametrize(
    "inner,mode",
    [(i, m) for i in ("blocked", "ragged", "ragged_passes") for m in ("gather", "ring")]
    + [("blocked", "dense")],
)
@pytest.mark.parametrize("mesh_name", sorted(MESHES))
def test_layer_equals_single_device(eight, mesh_name, inner, mode):
    """16 experts, K = 3, biases and shared experts, idle experts (never routed to): the sharded
    layer gives the single-device output, and its expert weights stay split on the experts, with
    the rows gathered in one pass or sent round the ring (`gather_bytes`), through the grouped
    backend or, for these 40 rows by default, every local expert on every row (`dense_rows`)."""
    preset, sizes = MESHES[mesh_name]
    mesh = make_mesh(preset, **sizes)
    moe = M.MoESpec(
        num_experts=16, top_k=3, expert_size=8, router_bias=True, expert_bias=True,
        shared_size=12, shared_gate=True, weight_dtype="hidden",
    )  # fmt: skip
    d = 24
    p = _random_params(moe, d, seed=4)
    p["router_bias"][12:] = -50.0  # experts 12.. almost never chosen
    x = np.random.default_rng(5).standard_normal((8, 5, d)).astype(np.float32)
    want = np.asarray(_block(p, x, moe=moe, backend=E.BLOCKED))
    backend = E.select_experts(mesh, inner.removesuffix("_passes"))
    if inner == "ragged_passes":  # each device's assignments in passes of 4 rows (the loop)
        backend = dataclasses.replace(backend, inner=E.RaggedExperts(pass_rows=4))
    assert isinstance(backend, ExpertParallel) and expert_axes(mesh, 16)
    assert backend.gathers(8 * 5, moe, d, 4) and 8 * 5 <= backend.dense_rows  # the defaults
    if mode != "dense":
        gather_bytes = 0 if mode == "ring" else 1 << 40
        backend = dataclasses.replace(backend, gather_bytes=gather_bytes, dense_rows=0)
    placed = _placed(p, moe, d, mesh)
    assert placed["gate"].sharding.spec[0] is not None
    got = _block(
        placed, jax.device_put(x, batch_sharding(mesh, x.shape)), moe=moe, backend=backend,
        mesh=mesh,
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    text = _block.lower(placed, x, moe=moe, backend=backend, mesh=mesh).compile().as_text()
    assert not expert_weight_gathers(text, d=d, f=8), mesh_name
    if mesh_name != "data_model":  # rows split over fsdp, an expert axis: gathered or ringed
        ringed = any(
            "collective-permute" in line and "/ppermute" in line for line in text.splitlines()
        )
        scattered = "reduce-scatter" in text or "all-reduce" in text
        assert ringed == (mode == "ring") and (scattered or mode == "ring"), mode
    if inner == "blocked":  # its loop over blocks, which the dense pass does not have
        assert ("while" in text) == (mode != "dense"), mode


def test_gather_threshold():
    """The gather / ring choice by the gathered assignments' bytes (module docstring's figures)."""
    ep = ExpertParallel(inner=E.RAGGED)
    mixtral = M.MoESpec(num_experts=8, top_k=2, expert_size=14336)
    qwen3 = M.MoESpec(num_experts=128, top_k=8, expert_size=768)
    assert ep.gathers(64, mixtral, 4096, 2)  # a decode step of 64 rows: 8.4 MB
    assert not ep.gathers(16384, qwen3, 2048, 2)  # 16,384 scored tokens: 940 MiB
    assert ep.gathers(4096, qwen3, 2048, 2)  # 235 MiB


def expert_weight_gathers(hlo: str, *, d: int, f: int) -> list[str]:
    """The all-gathers of an optimized HLO module whose shapes are stacked expert weights
    ([..., X', D', F] or [..., X', F, D'] with D' = D or a shard of it, at least 3 dims): none
    under expert parallelism."""
    bad = []
    for line in hlo.splitlines():
        if " all-gather(" not in line and " all-gather-start(" not in line:
            continue
        result = line.split(" all-gather")[0]
        for dims in result.split("[")[1:]:
            shape = [int(v) for v in dims.split("]")[0].split(",") if v]
            if len(shape) >= 3 and f in shape[-2:] and any(d % s == 0 for s in shape[-2:]):
                bad.append(line.strip())
    return bad


# ---------------------------------------------------------------------------------------------
# Every MoE family end to end: log-likelihoods and greedy generations on a mesh = one device
# ---------------------------------------------------------------------------------------------

LOGLIKELIHOOD = [
    ("The quick brown fox", " jumps over"),
    ("Water boils at", " 100 degrees"),
    ("def add(a, b):", " return a + b"),
]
PROMPTS = ["The quick brown", "Water", "print(add("]


def _run(path: str, mesh: str, sizes: dict):
    from jaxeval.api.instance import Instance
    from jaxeval.lm.jax_lm import JaxLM

    lm = JaxLM(pretrained=path, mesh=make_mesh(mesh, **sizes) if sizes else mesh,
               max_length=64, buckets=[(64, 8)])  # fmt: skip
    ll = [Instance("loglikelihood", {}, args, i) for i, args in enumerate(LOGLIKELIHOOD)]
    gen = [
        Instance("generate_until", {}, (p, {"until": ["\n\n"], "max_gen_toks": 8}), i)
        for i, p in enumerate(PROMPTS)
    ]
    scores = np.array([r[0] for r in lm.loglikelihood(ll, disable_tqdm=True)])
    return lm, scores, lm.generate_until(gen, disable_tqdm=True)


@pytest.mark.slow
@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_family_scores_and_generates_as_single_device(eight, tiny, family):
    """Each family on one of the three meshes (in turn): the same log-likelihoods (1e-5) and
    the same greedy tokens as on one device, the routed experts under expert parallelism."""
    path = tiny(family)
    name = sorted(MESHES)[MOE_FAMILIES.index(family) % len(MESHES)]
    _, want_scores, want_text = _run(path, "single", {})
    lm, scores, text = _run(path, *MESHES[name])
    assert isinstance(lm.loaded.runtime.experts, ExpertParallel)
    gate = lm.loaded.params["layers"]["moe"]["gate"]  # [L, X = 8, D, F]
    assert gate.sharding.spec[1] is not None, gate.sharding.spec
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5, err_msg=name)
    assert text == want_text, name

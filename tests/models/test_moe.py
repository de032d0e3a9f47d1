"""The MoE layer (`jaxeval.models.experts`) against transformers' sparse MoE blocks, one per family.

Each family's HF block is built alone from a tiny config, its weights (biases and the correction
bias too) redrawn from N(0, 0.2), copied into the canonical layout and run beside ours on the same
x [2, 7, D]. HF runs with both its experts implementations: "grouped_mm" (what `from_pretrained`
picks) and "eager" (the per-expert loop).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from jax.sharding import Mesh

from jaxeval.errors import JaxevalError
from jaxeval.models import experts as E
from jaxeval.models import experts as M
from jaxeval.models.experts import blocked
from jaxeval.models.param_info import is_info
from tests.models.common import assert_logits_close
from tests.needs_torch import REASON

torch = pytest.importorskip("torch", reason=REASON)

SMALL = {"num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}


@dataclasses.dataclass(frozen=True)
class Family:
    """One family: its HF config, block class, router attribute and our MoESpec for that config."""

    config: str  # transformers config class
    block: str  # module path : class of the sparse MoE block
    router: str  # the block's router attribute
    hf: dict  # config keywords
    spec: dict  # MoESpec keywords


FAMILIES = {
    "mixtral": Family(
        "MixtralConfig",
        "mixtral:MixtralSparseMoeBlock",
        "gate",
        {"hidden_size": 32, "intermediate_size": 24, "num_local_experts": 8},
        {"expert_size": 24, "norm_topk_prob": True},
    ),
    "qwen2_moe": Family(
        "Qwen2MoeConfig",
        "qwen2_moe:Qwen2MoeSparseMoeBlock",
        "gate",
        {
            "hidden_size": 48,
            "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 40,
            "num_experts": 8,
            "norm_topk_prob": False,
        },
        {"expert_size": 24, "shared_size": 40, "shared_gate": True, "weight_dtype": "hidden"},
    ),
    "qwen3_moe": Family(
        "Qwen3MoeConfig",
        "qwen3_moe:Qwen3MoeSparseMoeBlock",
        "gate",
        {"hidden_size": 32, "moe_intermediate_size": 16, "num_experts": 8, "norm_topk_prob": True},
        {"expert_size": 16, "norm_topk_prob": True, "weight_dtype": "hidden"},
    ),
    "olmoe": Family(
        "OlmoeConfig",
        "olmoe:OlmoeSparseMoeBlock",
        "gate",
        {"hidden_size": 32, "intermediate_size": 24, "num_experts": 6, "norm_topk_prob": False},
        {"expert_size": 24, "weight_dtype": "hidden"},
    ),
    "granitemoe": Family(
        "GraniteMoeConfig",
        "granitemoe:GraniteMoeMoE",
        "router",
        {"hidden_size": 32, "intermediate_size": 24, "num_local_experts": 8},
        {"expert_size": 24, "order": "topk_then_softmax", "weight_dtype": "hidden"},
    ),
    "deepseek_v2": Family(
        "DeepseekV2Config",
        "deepseek_v2:DeepseekV2Moe",
        "gate",
        {
            "hidden_size": 32,
            "moe_intermediate_size": 16,
            "n_routed_experts": 8,
            "n_shared_experts": 2,
            "topk_method": "group_limited_greedy",
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 1.5,
            "norm_topk_prob": True,  # ignored by HF's v2 router
        },
        {
            "expert_size": 16,
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 1.5,
            "shared_size": 32,
            "router_dtype": "float32",
        },
    ),
    "deepseek_v2_greedy": Family(
        "DeepseekV2Config",
        "deepseek_v2:DeepseekV2Moe",
        "gate",
        {
            "hidden_size": 32,
            "moe_intermediate_size": 16,
            "n_routed_experts": 8,
            "n_shared_experts": 1,
            "topk_method": "greedy",
        },
        {"expert_size": 16, "shared_size": 16, "router_dtype": "float32"},
    ),
    "deepseek_v3": Family(
        "DeepseekV3Config",
        "deepseek_v3:DeepseekV3MoE",
        "gate",
        {
            "hidden_size": 32,
            "moe_intermediate_size": 16,
            "n_routed_experts": 8,
            "n_shared_experts": 1,
            "n_group": 2,
            "topk_group": 1,
            "routed_scaling_factor": 2.5,
            "norm_topk_prob": True,
        },
        {
            "expert_size": 16,
            "scoring": "sigmoid",
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
            "n_group": 2,
            "topk_group": 1,
            "group_score": "top2_sum",
            "correction_bias": True,
            "shared_size": 16,
            "router_dtype": "float32",
        },
    ),
    "glm4_moe": Family(
        "Glm4MoeConfig",
        "glm4_moe:Glm4MoeMoE",
        "gate",
        {
            "hidden_size": 48,
            "moe_intermediate_size": 16,
            "n_routed_experts": 8,
            "n_shared_experts": 2,
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 1.0,
            "norm_topk_prob": False,
        },
        {
            "expert_size": 16,
            "scoring": "sigmoid",
            "n_group": 4,
            "topk_group": 2,
            "group_score": "top2_sum",
            "correction_bias": True,
            "shared_size": 32,
            "router_dtype": "float32",
        },
    ),
    "gpt_oss": Family(
        "GptOssConfig",
        "gpt_oss:GptOssMLP",
        "router",
        # a low clamp so that both sides of gpt_oss's SwiGLU clamp are exercised
        {"hidden_size": 32, "intermediate_size": 24, "num_local_experts": 8, "swiglu_limit": 1.5},
        {
            "expert_size": 24,
            "order": "topk_then_softmax",
            "router_bias": True,
            "expert_bias": True,
            "activation": "gpt_oss",
            "swiglu_limit": 1.5,
            "weight_dtype": "hidden",
        },
    ),
}


def _hf_block(family: Family, **overrides):
    """The HF block (experts "grouped_mm") with every parameter and buffer redrawn from N(0, 0.2)."""
    kwargs = {**SMALL, "num_experts_per_tok": 2, "head_dim": 8, **family.hf, **overrides}
    config = getattr(transformers, family.config)(**kwargs)
    config._experts_implementation = "grouped_mm"
    module, cls = family.block.split(":")
    block_cls = getattr(
        importlib.import_module(f"transformers.models.{module}.modeling_{module}"), cls
    )
    block = block_cls(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, t in sorted(block.state_dict(keep_vars=True).items()):
            t.copy_(0.2 * torch.randn(t.shape, generator=gen))
    return block


def _spec(family: Family, **overrides) -> M.MoESpec:
    hf = family.hf
    experts = hf.get("n_routed_experts") or hf.get("num_local_experts") or hf["num_experts"]
    return M.MoESpec(**{"num_experts": experts, "top_k": 2, **family.spec, **overrides})


def canonical_params(block) -> dict:
    """The HF block's weights in `moe_param_layout`'s layout (x @ W) for one layer."""
    sd = {k: v.detach().numpy() for k, v in block.state_dict().items()}
    router = "router" if "router.weight" in sd else "gate"
    p = {"router": sd[f"{router}.weight"].T}
    if f"{router}.bias" in sd:
        p["router_bias"] = sd[f"{router}.bias"]
    if f"{router}.e_score_correction_bias" in sd:
        p["correction_bias"] = sd[f"{router}.e_score_correction_bias"]
    gate_up = sd["experts.gate_up_proj"]
    if "experts.gate_up_proj_bias" in sd:  # gpt_oss: [X, D, 2F], gate and up interleaved
        p["gate"], p["up"] = gate_up[..., ::2], gate_up[..., 1::2]
        bias = sd["experts.gate_up_proj_bias"]
        p["gate_bias"], p["up_bias"] = bias[..., ::2], bias[..., 1::2]
        p["down"], p["down_bias"] = sd["experts.down_proj"], sd["experts.down_proj_bias"]
    else:  # [X, 2F, D]: gate rows, then up rows
        f = gate_up.shape[1] // 2
        p["gate"] = gate_up[:, :f].transpose(0, 2, 1)
        p["up"] = gate_up[:, f:].transpose(0, 2, 1)
        p["down"] = sd["experts.down_proj"].transpose(0, 2, 1)
    for name in ("shared_expert", "shared_experts"):
        if f"{name}.gate_proj.weight" in sd:
            p["shared"] = {k: sd[f"{name}.{k}_proj.weight"].T for k in ("gate", "up", "down")}
    if "shared_expert_gate.weight" in sd:
        p["shared_gate"] = sd["shared_expert_gate.weight"].T
    return jax.tree.map(np.ascontiguousarray, p)


def hf_forward(block, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = block(torch.as_tensor(x))
    return (out[0] if isinstance(out, tuple) else out).numpy()


def hf_route(block, router: str, x: np.ndarray):
    """(weights, experts) of the HF router, each token's K sorted by expert index."""
    with torch.no_grad():
        _, weights, experts = getattr(block, router)(torch.as_tensor(x.reshape(-1, x.shape[-1])))
    return _by_expert(weights.float().numpy(), experts.numpy())


def _by_expert(weights, experts):
    order = np.argsort(experts, axis=-1)
    return np.take_along_axis(weights, order, -1), np.take_along_axis(experts, order, -1)


@functools.partial(jax.jit, static_argnames="moe")
def route_fn(p, x, *, moe):
    """The routing weights as moe_block applies them (in float32) and the chosen experts."""
    weights, experts = M.route(M.router_logits(p, x.reshape(-1, x.shape[-1]), moe=moe), p, moe)
    if moe.weight_dtype == "hidden":
        weights = weights.astype(x.dtype)
    return weights.astype(jnp.float32), experts


@functools.partial(jax.jit, static_argnames=("moe", "backend"))
def layer_fn(p, x, *, moe, backend=E.BLOCKED):
    """(moe_block's output, route_fn's weights and experts) in one compile."""
    return M.moe_block(p, x, moe=moe, backend=backend), *route_fn(p, x, moe=moe)


def block_fn(p, x, *, moe, backend=E.BLOCKED):
    return layer_fn(p, x, moe=moe, backend=backend)[0]


def _shapes(tree, lead: int = 0) -> dict[str, tuple[int, ...]]:
    """{path: shape without its first `lead` axes} of a tree of arrays or ParamInfo."""
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_info)[0]
    return {jax.tree_util.keystr(k): tuple(v.shape)[lead:] for k, v in flat}


# ---------------------------------------------------------------------------------------------
# 1. Each family equals transformers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_transformers(name):
    family = FAMILIES[name]
    moe = _spec(family)
    block = _hf_block(family)
    p = canonical_params(block)
    d = p["router"].shape[0]
    assert _shapes(p) == _shapes(M.moe_param_layout(moe, d, 3), lead=1)
    x = np.random.default_rng(1).normal(size=(2, 7, d)).astype(np.float32)

    got, got_w, got_e = layer_fn(p, x, moe=moe)
    got = np.asarray(got)
    assert got.shape == x.shape and got.dtype == np.float32
    for implementation in ("grouped_mm", "eager"):
        block.experts.config._experts_implementation = implementation
        assert_logits_close(got, hf_forward(block, x), f"{name} vs HF {implementation}")

    want_w, want_e = hf_route(block, family.router, x)
    got_w, got_e = _by_expert(np.asarray(got_w), np.asarray(got_e))
    np.testing.assert_array_equal(got_e, want_e)
    np.testing.assert_allclose(got_w, want_w, rtol=1e-6, atol=1e-7)


def test_deepseek_v2_group_masked_scores_are_zero_weights():
    """deepseek_v2 with fewer eligible experts than K: HF's top-k reads zeroed scores as weights."""
    family = FAMILIES["deepseek_v2"]
    block = _hf_block(family, n_group=4, topk_group=1, num_experts_per_tok=3)
    moe = _spec(family, topk_group=1, top_k=3)
    p = canonical_params(block)
    x = np.random.default_rng(2).normal(size=(1, 5, 32)).astype(np.float32)
    with torch.no_grad():
        _, want_w, _ = block.gate(torch.as_tensor(x[0]))
    got, got_w, _ = layer_fn(p, x, moe=moe)
    np.testing.assert_allclose(np.sort(got_w, -1), np.sort(want_w.numpy(), -1), rtol=1e-6)
    assert (np.asarray(got_w) == 0).sum(-1).tolist() == [1] * 5  # groups of 2 experts, K = 3
    assert_logits_close(got, hf_forward(block, x))


# ---------------------------------------------------------------------------------------------
# 2. Near ties
# ---------------------------------------------------------------------------------------------
# Guaranteed: the experts torch chooses whenever the float32 values that torch.topk ranks equal
# ours bitwise and differ at the k-th place. Which near ties stay apart:
# * granitemoe, gpt_oss rank the logits themselves: any two distinct logits, 1 ulp apart too.
# * the softmax families rank exp(logit - max) / sum. With the pair at the top, exp(0) = 1 on both
#   sides and exp(-1e-7) rounds to 1 - 2^-23: apart. A pair 1 ulp apart at 0.5 (3e-8) is not:
#   exp(-2^-25) rounds to 1 exactly, an exact tie in float32.
# * sigmoid (deepseek_v3, glm4_moe) has slope <= 1/4: logits 1e-7 apart are under an ulp apart
#   as scores and round to the same float32 (a tie); 1e-6 apart stay apart.
# Not guaranteed:
# * exact ties of what is ranked: jax.lax.top_k takes the lower index; torch's CPU top-k (a
#   partial sort) promises no order: for [1, 3, 3, 2, 3, 0, 3, 1] and k = 3 it returns [1, 6, 4]
#   where we return [1, 2, 4].
# * a pair below the top (k-th vs k+1-th for k > 1) in the softmax families: exp of two logits
#   1e-7 apart is one or two ulps apart, and XLA's and torch's exp may round them differently.
# * logits from real activations: XLA and torch sum the D products in different orders, an ulp
#   apart. The test removes that: each token is a unit vector, so its logits are one row of the
#   router weights, exact in any summation order, and its best two (K = 1: the pair at the top)
#   are 1 ulp, 1e-7 or 1e-6 apart.

GAPS = (0.0, 1e-7, 1e-6)  # 0.0: 1 ulp
STAY_APART = {"topk_then_softmax": 0.0, "softmax": 1e-7, "sigmoid": 1e-6}
RANKED = {  # what HF's top-k ranks, from the logits
    "topk_then_softmax": lambda logits: logits,
    "softmax": lambda logits: torch.softmax(logits, -1),
    "sigmoid": torch.sigmoid,
}


def _near_tie_router(d: int, x: int, rng):
    """Router weights [X, D] whose row t (token t's logits) has its best two experts (a, b) at 0.5
    or -0.75 and GAPS[t % 3] apart; and a, b, the gap of each row."""
    logits = rng.uniform(-3.0, -1.0, size=(d, x)).astype(np.float32)
    pairs = np.stack([rng.choice(x, 2, replace=False) for _ in range(d)])  # [D, 2]
    gaps = np.array([GAPS[t % len(GAPS)] for t in range(d)])
    for t, (a, b) in enumerate(pairs):
        top = np.float32(0.5 if (t // len(GAPS)) % 2 else -0.75)
        logits[t, a] = top
        logits[t, b] = np.nextafter(top, np.float32(-1)) if gaps[t] == 0 else top - gaps[t]
        assert logits[t, b] < top
    return logits.T.copy(), pairs, gaps


NEAR = {
    "mixtral": {},
    "qwen3_moe": {},
    "granitemoe": {},
    "gpt_oss": {},
    "deepseek_v2": {},
    "deepseek_v3": {"n_group": 1, "topk_group": 1},  # the pair's groups would rank by others
    "glm4_moe": {"n_group": 1, "topk_group": 1},
}


@pytest.mark.parametrize("name", sorted(NEAR))
def test_near_ties_choose_what_torch_chooses(name):
    family = FAMILIES[name]
    block = _hf_block(family, num_experts_per_tok=1, **NEAR[name])
    moe = _spec(family, top_k=1, norm_topk_prob=False, **NEAR[name])
    d = block.experts.config.hidden_size
    router, pairs, gaps = _near_tie_router(d, moe.num_experts, np.random.default_rng(3))
    module = getattr(block, family.router)
    with torch.no_grad():
        module.weight.copy_(torch.as_tensor(router))
        for attr in ("bias", "e_score_correction_bias"):
            if hasattr(module, attr):
                getattr(module, attr).zero_()
    p = canonical_params(block)
    x = np.eye(d, dtype=np.float32)[None]  # token t = unit vector t
    want = hf_route(block, family.router, x)[1][:, 0]
    got = np.asarray(route_fn(p, x, moe=moe)[1])[:, 0]

    kind = "topk_then_softmax" if moe.order == "topk_then_softmax" else moe.scoring
    ranked = RANKED[kind](torch.as_tensor(router.T)).numpy()  # what HF's top-k ranks
    rows = np.arange(d)
    tied = ranked[rows, pairs[:, 0]] == ranked[rows, pairs[:, 1]]
    assert not tied[gaps >= STAY_APART[kind]].any()
    assert tied.any() == (kind != "topk_then_softmax")  # the 1-ulp pairs at 0.5 and more
    np.testing.assert_array_equal(want[~tied], pairs[~tied, 0])  # the better of the pair
    np.testing.assert_array_equal(got[~tied], want[~tied])
    np.testing.assert_array_equal(got[tied], pairs[tied].min(axis=1))  # our tie rule


def test_exact_ties_take_the_lower_expert():
    moe = M.MoESpec(num_experts=8, top_k=3, expert_size=4)
    logits = np.array([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0, 3.0, 1.0]], np.float32)
    _, experts = jax.jit(M.route, static_argnums=2)(logits, {}, moe)
    assert experts.tolist() == [[1, 2, 4]]


# ---------------------------------------------------------------------------------------------
# 3. Backends agree
# ---------------------------------------------------------------------------------------------


def _random_params(moe: M.MoESpec, d: int, seed: int):
    """N(0, 0.2) parameters of one layer (numpy: no per-shape compiles)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda i: (0.2 * rng.standard_normal(i.shape[1:])).astype(np.float32),
        M.moe_param_layout(moe, d, 1),
        is_leaf=is_info,
    )


def test_backends_agree():
    """Blocks of 1 and 3 rows: groups spanning several blocks; the rule's 8 rows here: one mostly
    padded block per expert; experts 12..15 get few tokens or none. The spec takes every optional
    part (biases, shared experts and their gate)."""
    spec = M.MoESpec(
        num_experts=16, top_k=3, expert_size=8, router_bias=True, expert_bias=True,
        shared_size=12, shared_gate=True, weight_dtype="hidden",
    )  # fmt: skip
    d = 24
    p = _random_params(spec, d, seed=4)
    p["router"][:, 12:] = 0.0  # experts 12.. only by their bias: never
    p["router_bias"][12:] = -50.0
    x = np.random.default_rng(5).standard_normal((2, 7, d)).astype(np.float32)
    want, _, experts = layer_fn(p, x, moe=spec, backend=E.DENSE)
    sizes = np.bincount(np.asarray(experts).ravel(), minlength=spec.num_experts)
    assert (sizes == 0).any() and (sizes > 3).any(), sizes  # idle experts, multi-block groups
    want = np.asarray(want)
    backends = [E.RAGGED, E.BLOCKED, E.BlockedExperts(block=1), E.BlockedExperts(block=3)]
    backends += [E.RaggedExperts(pass_rows=r) for r in (1, 5, 16)]  # 42 assignments in passes
    for backend in backends:
        got = block_fn(p, x, moe=spec, backend=backend)
        np.testing.assert_allclose(
            np.asarray(got), want, rtol=1e-6, atol=1e-6 * np.abs(want).max(), err_msg=str(backend)
        )


def test_block_layout_docstring_example():
    """The module docstring's drawing: experts [2, 0, 2, 2, 0], X = 3, K = 1, m = 2."""
    experts = np.array([[2], [0], [2], [2], [0]], np.int32)
    weights = np.arange(1, 6, dtype=np.float32)[:, None]
    layout = jax.jit(blocked._block_layout, static_argnums=(2, 3, 4))
    token, weight, block_expert, used = layout(experts, weights, 3, 2, 4)
    assert token.tolist() == [1, 4, 0, 2, 3, 5, 5, 5]  # 5 = B*T marks padding
    assert weight.tolist() == [2.0, 5.0, 1.0, 3.0, 4.0, 0.0, 0.0, 0.0]
    assert int(used) == 3 and block_expert.tolist()[:3] == [0, 2, 2]


def test_ragged_pass_rule():
    """One pass holding every expert; 1.25 times the share here, in multiples of 128, else."""
    r = E.RAGGED
    assert r.rows_per_pass(65536, 128, 128) == 65536
    assert r.rows_per_pass(65536, 16, 128) == 10240  # Qwen3-30B-A3B on 8 chips: 8,192 expected
    assert r.rows_per_pass(40, 2, 16) == 40  # never more than all of them
    assert E.RaggedExperts(pass_rows=7).rows_per_pass(40, 16, 16) == 7


def test_block_size_rule():
    rule = E.BLOCKED
    assert rule.block_size(2048 * 8, 128) == 32  # Qwen3-30B-A3B, 2,048 tokens
    assert rule.block_size(8 * 8, 128) == 8  # a decode step: the clamp
    assert rule.block_size(10**6, 8) == 128
    assert E.BlockedExperts(block=5).block_size(10**6, 8) == 5
    assert rule.max_blocks(2048 * 8, 128) == (2048 * 8 + 128 * 31) // 32
    assert rule.max_blocks(5, 128) == 5  # 5 assignments: at most 5 groups of one


# ---------------------------------------------------------------------------------------------
# 4. FLOPs
# ---------------------------------------------------------------------------------------------
# XLA:CPU expands ragged_dot into every expert on every sorted assignment. At the shape below
# (Qwen3-30B-A3B: D 2,048, X 128, K 8, F 768; 2,048 tokens, bfloat16) the compiled RAGGED layer
# counts 1.98e13 FLOPs, 128 times (X times) the 1.55e11 active-expert FLOPs. BLOCKED's loop runs
# at most 636 blocks of m = 32 rows, 1.24 times the 16,384 assignments: with the router, the
# routing and the activations, at most 1.28 times the active FLOPs. (Timed on the 2-core CPU at
# X 32, K 4, D 512, F 256, 1,024 tokens, float32, a loaded machine: BLOCKED 0.2-0.35 s, DENSE
# 1.0-1.4 s, RAGGED 3.5-6 s.)


def _flops(compiled) -> float:
    cost = compiled.cost_analysis()
    return float((cost[0] if isinstance(cost, list) else cost)["flops"])


def test_blocked_flops_stay_near_the_active_experts():
    d, x, k, f, n = 2048, 128, 8, 768, 2048
    moe = M.MoESpec(num_experts=x, top_k=k, expert_size=f, norm_topk_prob=True)
    bf16 = jnp.bfloat16
    params = jax.tree.map(
        lambda i: jax.ShapeDtypeStruct(i.shape[1:], bf16),
        M.moe_param_layout(moe, d, 1),
        is_leaf=is_info,
    )
    tokens = jax.ShapeDtypeStruct((1, n, d), bf16)
    layer = _flops(jax.jit(functools.partial(M.moe_block, moe=moe)).lower(params, tokens).compile())
    m = E.BLOCKED.block_size(n * k, x)
    one = {
        name: jax.ShapeDtypeStruct(params[name].shape[1:], bf16) for name in ("gate", "up", "down")
    }
    rows = jax.ShapeDtypeStruct((m, d), bf16)
    block = _flops(jax.jit(functools.partial(E.expert_mlp, moe=moe)).lower(one, rows).compile())
    active = 2 * 3 * n * k * d * f
    assert block == pytest.approx(2 * 3 * m * d * f, rel=0.05)  # and the activation
    # the loop body counted at most once in `layer`, run at most max_blocks times
    bound = layer + E.BLOCKED.max_blocks(n * k, x) * block
    ratio = bound / active
    print(f"m={m} blocked/active FLOPs <= {ratio:.3f}")
    assert ratio <= 1.3


# ---------------------------------------------------------------------------------------------
# 5. bfloat16
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen2_moe", "deepseek_v3"])
def test_bfloat16_stays_near_float32(name):
    """bfloat16 parameters and x: within 2e-2 of the same numbers in float32, and of HF's block
    in bfloat16. (A token whose routing flips under bfloat16 logits, as gpt_oss's can, would be
    farther from float32: HF's too.)"""
    family = FAMILIES[name]
    moe = _spec(family)
    block = _hf_block(family)
    p16 = jax.tree.map(lambda a: np.asarray(a).astype(jnp.bfloat16), canonical_params(block))
    d = p16["router"].shape[0]
    x16 = np.random.default_rng(6).standard_normal((2, 7, d)).astype(jnp.bfloat16)
    got = block_fn(p16, x16, moe=moe)
    assert got.dtype == jnp.bfloat16
    got = np.asarray(got, np.float32)
    f32 = jax.tree.map(lambda a: a.astype(np.float32), p16)  # the same numbers in float32
    want = np.asarray(block_fn(f32, x16.astype(np.float32), moe=moe))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 2e-2 * scale
    with torch.no_grad():
        hf = block.to(torch.bfloat16)(torch.as_tensor(x16.astype(np.float32)).bfloat16())
    assert np.abs(got - hf.float().numpy()).max() <= 2e-2 * scale


# ---------------------------------------------------------------------------------------------
# Choice and validation
# ---------------------------------------------------------------------------------------------


def test_select_experts(monkeypatch):
    monkeypatch.delenv(E.ENV, raising=False)
    assert E.select_experts("tpu") is E.RAGGED
    assert E.select_experts("cpu") is E.BLOCKED
    assert E.select_experts("gpu") is E.BLOCKED
    mesh = Mesh(np.array(jax.devices("cpu")[:1]), ("data",))
    assert E.select_experts(mesh) is E.BLOCKED
    assert E.select_experts("cpu", "ragged") is E.RAGGED
    monkeypatch.setenv(E.ENV, "ragged")
    assert E.select_experts("cpu") is E.RAGGED
    assert E.select_experts("tpu", "blocked") is E.BLOCKED
    with pytest.raises(JaxevalError, match="experts='dense2' is not one of"):
        E.select_experts("cpu", "dense2")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scoring": "relu"}, "scoring='relu'"),
        ({"top_k": 9}, "top_k=9"),
        ({"n_group": 3}, "n_group=3"),
        ({"n_group": 2, "topk_group": 3}, "topk_group=3"),
        ({"order": "topk_then_softmax", "norm_topk_prob": True}, "topk_then_softmax"),
        ({"activation": "tanh"}, "activation='tanh'"),
        ({"shared_gate": True}, "shared_gate"),
    ],
)
def test_spec_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        M.MoESpec(**{"num_experts": 8, "top_k": 2, "expert_size": 4, **kwargs})


def test_spec_is_a_static_key():
    a = M.MoESpec(num_experts=8, top_k=2, expert_size=4)
    assert hash(a) == hash(dataclasses.replace(a)) and a != dataclasses.replace(a, top_k=1)

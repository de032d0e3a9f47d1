"""The in-memory path equals the checkpoint path on the same weights, request for request.

One Flax nnx Llama (examples/nnx_llama.py) is written as a Hugging Face checkpoint and loaded back
through `JaxLM(pretrained=DIR)`; the same weights are then evaluated without any file:
(a) as our own decoder (ModelSpec + params sharded on an 8-device mesh), (b) as the nnx module
(hidden + head weight, packed rows, generation by recomputation), (b') as a Flax linen module that
only takes a padding mask (logits, padded rows), (b'') as plain functions with a user KV cache.
Loglikelihood, rolling loglikelihood and greedy generation agree per request (1e-4, float32).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.inmemory import FunctionModel, InMemoryLM
from jaxeval.lm.jax_lm import JaxLM
from tests.inmemory.conftest import MAX_LENGTH
from tests.lm import workloads

pytestmark = pytest.mark.slow

TOL = 1e-4


# One scoring shape (T = K = 128, 8 rows) for every request: one compilation per model.
SHAPE = {"buckets": [(MAX_LENGTH, MAX_LENGTH)], "token_budget": 8 * MAX_LENGTH}


def _instances(kind, args):
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def _requests(data_root):
    ll = workloads.arc_easy(data_root, 3) + workloads.lambada(data_root, 3)
    rolling = workloads.wikitext_pages(data_root, 2, chars=700)
    gen = [(ctx, {"until": ["\n"], "max_gen_toks": 6, "do_sample": False}) for ctx, _ in ll[::4]]
    return ll, rolling, gen


def _answers(lm, data_root, token_pairs):
    """All three request types, plus token-level pairs whose greedy flags are known."""
    ll, rolling, gen = _requests(data_root)
    return {
        "generate": lm.generate_until(_instances("generate_until", gen), disable_tqdm=True),
        "loglikelihood": lm.loglikelihood(_instances("loglikelihood", ll), True),
        "rolling": lm.loglikelihood_rolling(_instances("loglikelihood_rolling", rolling), True),
        "tokens": list(zip(*lm.loglikelihood_tokens(token_pairs, disable_tqdm=True))),
    }


@pytest.fixture(scope="module")
def token_pairs(nnx_model, tokenizer, data_root):
    """(context ids, [the model's argmax next token]) and (context ids, [its argmin]): one greedy
    hit and one miss per context, computed from the nnx module directly."""
    import jax.numpy as jnp

    from examples.nnx_llama import causal_mask

    _, _, gen = _requests(data_root)
    contexts = [tokenizer(ctx)["input_ids"][-(MAX_LENGTH - 1) :] for ctx, _ in gen]
    tokens = np.zeros((len(contexts), MAX_LENGTH - 1), np.int32)  # right-padded, one jit call
    valid = np.zeros(tokens.shape, np.int32)
    for row, ids in enumerate(contexts):
        tokens[row, : len(ids)], valid[row, : len(ids)] = ids, 1
    positions = np.broadcast_to(np.arange(MAX_LENGTH - 1), tokens.shape)
    mask = causal_mask(jnp.asarray(valid))
    logits = jax.jit(lambda m, t, p, k: m(t, p, k))(nnx_model, tokens, positions, mask)
    pairs = []
    for row, ids in enumerate(contexts):
        last = np.asarray(logits[row, len(ids) - 1])
        pairs += [(ids, [int(last.argmax())]), (ids, [int(last.argmin())])]
    return pairs


@pytest.fixture(scope="module")
def reference(checkpoint, data_root, token_pairs):
    """The checkpoint path."""
    lm = JaxLM(pretrained=checkpoint, max_length=MAX_LENGTH, mesh="single", **SHAPE)
    return _answers(lm, data_root, token_pairs)


def _assert_same(actual, expected):
    got = np.array([a for a, _ in actual["loglikelihood"]])
    want = np.array([a for a, _ in expected["loglikelihood"]])
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    assert [g for _, g in actual["loglikelihood"]] == [g for _, g in expected["loglikelihood"]]
    np.testing.assert_allclose(actual["rolling"], expected["rolling"], rtol=0, atol=TOL)
    np.testing.assert_allclose(
        [a for a, _ in actual["tokens"]], [a for a, _ in expected["tokens"]], rtol=0, atol=TOL
    )
    assert [bool(g) for _, g in actual["tokens"]] == [bool(g) for _, g in expected["tokens"]]
    assert actual["generate"] == expected["generate"]


def test_reference_is_not_trivial(reference, token_pairs):
    """The weights give varied answers: greedy hits and misses, non-empty generations."""
    assert [bool(g) for _, g in reference["tokens"]] == [True, False] * (len(token_pairs) // 2)
    assert any(text.strip() for text in reference["generate"])


def test_own_decoder_sharded_in_memory(nnx_model, tokenizer, reference, token_pairs, data_root):
    """(a) ModelSpec + params already sharded on the caller's 8-device mesh; KV-cache decode."""
    from examples.nnx_llama import to_decoder
    from jaxeval.models import param_shardings
    from jaxeval.platform.mesh import make_mesh

    mesh = make_mesh("data_model", model=2)
    spec, params = to_decoder(nnx_model.weights(), nnx_model.cfg, tokenizer)
    params = jax.device_put(params, param_shardings(spec, mesh))
    lm = InMemoryLM(spec, params, tokenizer=tokenizer, max_length=MAX_LENGTH, **SHAPE)
    assert (
        lm.mesh is mesh and lm.scorer.params["layers"]["attn"]["q"] is params["layers"]["attn"]["q"]
    )
    _assert_same(_answers(lm, data_root, token_pairs), reference)
    assert lm.model_info()["in_memory"]["generation"] == "kv_cache"


def test_nnx_module_in_memory(nnx_model, tokenizer, reference, token_pairs, data_root):
    """(b) the nnx module: hidden + head_weight, packed rows, generation by recomputation."""
    from examples.nnx_llama import NnxLlama

    lm = InMemoryLM.from_nnx(
        nnx_model,
        tokenizer=tokenizer,
        max_length=MAX_LENGTH,
        **SHAPE,
        hidden=NnxLlama.hidden,
        head_weight=NnxLlama.head_weight,
    )
    assert lm.packing and lm.shared_context
    _assert_same(_answers(lm, data_root, token_pairs), reference)
    assert lm.model_info()["in_memory"]["generation"] == "recompute"


def test_linen_mask_only_in_memory(nnx_model, tokenizer, reference, token_pairs, data_root):
    """(b') a linen module taking an HF-style padding mask: logits, one request per padded row."""
    import flax.linen as nn

    from examples.nnx_llama import NAMES, causal_mask, hidden_states, weight_shapes

    cfg = nnx_model.cfg

    class LinenLlama(nn.Module):
        def setup(self):
            init = nn.initializers.normal(0.02)
            self.w = {n: self.param(n, init, s) for n, s in weight_shapes(cfg).items()}

        def __call__(self, tokens, positions, attention_mask):
            h = hidden_states(self.w, cfg, tokens, positions, causal_mask(attention_mask))
            return h @ self.w["lm_head"].T

    weights = nnx_model.weights()
    variables = {"params": {n: weights[n] for n in NAMES}}
    lm = InMemoryLM.from_linen(
        LinenLlama(),
        variables,
        tokenizer=tokenizer,
        max_length=MAX_LENGTH,
        **SHAPE,
        logits=LinenLlama.__call__,
        mask="padding",
        vocab_size=cfg.vocab_size,
    )
    assert not lm.packing and not lm.shared_context
    _assert_same(_answers(lm, data_root, token_pairs), reference)
    assert lm.stats["efficiency"] < 1.0  # padded rows: the cost the docs state


def test_function_model_with_user_cache(nnx_model, tokenizer, reference, token_pairs, data_root):
    """(b'') plain functions plus a user KV cache (our decoder's, through the public contract)."""
    from examples.nnx_llama import to_decoder

    spec, params = to_decoder(nnx_model.weights(), nnx_model.cfg, tokenizer)
    model = FunctionModel(
        vocab_size=spec.vocab_size,
        hidden=spec.hidden,
        head=spec.head,
        init_cache=spec.init_cache,
        forward_cached=spec.forward_cached,
    )
    lm = InMemoryLM(model, params, tokenizer=tokenizer, max_length=MAX_LENGTH, **SHAPE)
    _assert_same(_answers(lm, data_root, token_pairs), reference)
    assert lm.model_info()["in_memory"]["generation"] == "kv_cache"


def test_bad_input_is_a_clear_error(tokenizer):
    with pytest.raises(JaxevalError, match="exactly one of head_weight and head"):
        FunctionModel(vocab_size=8, hidden=lambda *a: None)
    with pytest.raises(JaxevalError, match="either logits, or hidden"):
        FunctionModel(vocab_size=8, logits=lambda *a: None, hidden=lambda *a: None)
    with pytest.raises(JaxevalError, match="mask"):
        FunctionModel(vocab_size=8, logits=lambda *a: None, mask="causal")
    model = FunctionModel(vocab_size=8, logits=lambda *a: None, mask="padding")
    with pytest.raises(JaxevalError, match="max_length"):
        InMemoryLM(model, {"w": np.zeros(2)}, tokenizer=tokenizer)
    with pytest.raises(JaxevalError, match="packing=True needs the segment mask"):
        InMemoryLM(model, {"w": np.zeros(2)}, tokenizer=tokenizer, max_length=16, packing=True)
    with pytest.raises(JaxevalError, match="neither a ModelSpec nor a FunctionModel"):
        InMemoryLM(object(), {}, tokenizer=tokenizer, max_length=16)

"""Greedy decoding with the KV cache (prefill, then one token per step) equals transformers'
`generate(do_sample=False)` token for token, on a left-padded batch of two prompts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.tiny_models import FAMILIES
from tests.models.common import greedy_generate, torch_generate

pytestmark = pytest.mark.slow

NEW_TOKENS = 8


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_transformers(models, family):
    loaded, torch_model = models(family)
    rng = np.random.default_rng(11)
    # 13 + 8 > the tiny window (8), so Mistral/Gemma decode past their sliding windows.
    prompts = [rng.integers(3, loaded.spec.vocab_size, n).tolist() for n in (6, 13)]
    ours = greedy_generate(loaded.spec, loaded.params, prompts, NEW_TOKENS)
    theirs = torch_generate(torch_model, prompts, NEW_TOKENS, pad_id=0)
    np.testing.assert_array_equal(ours, theirs)


def test_cache_prefill_equals_packed_forward(models):
    """The cached path's hidden states equal `hidden` on the same (left-padded) rows."""
    loaded, _ = models("gemma2")
    spec, params = loaded.spec, loaded.params
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, spec.vocab_size, (2, 12)).astype(np.int32)
    valid = np.ones((2, 12), bool)
    valid[0, :4] = False
    positions = np.clip(np.cumsum(valid, axis=1) - 1, 0, None).astype(np.int32)
    cache = spec.init_cache(2, 16, "float32")
    h_cached, cache = spec.forward_cached(params, cache, tokens, positions, valid, 0)
    h = spec.hidden(params, tokens, positions, valid.astype(np.int32), np.zeros_like(tokens))
    np.testing.assert_allclose(
        np.asarray(h_cached)[valid], np.asarray(h)[valid], rtol=1e-5, atol=1e-5
    )
    assert np.asarray(cache.valid)[:, :12].tolist() == valid.tolist()
    assert not np.asarray(cache.valid)[:, 12:].any()

"""Logits of every family equal transformers' PyTorch forward (float32), packed or not.

Metric (`common.assert_logits_close`): |ours - theirs| <= 1e-5 |theirs| + 1e-5 max|theirs|.
All checks of a family use one [2, 24] row shape, so each family compiles once. The tiny sliding
window is 8, so windows are exercised on Mistral and Gemma-2/3.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.tiny_models import FAMILIES
from tests.models.common import assert_logits_close, full_rows, logits_fn, torch_logits

B, T = 2, 24


def _tokens(spec, seed, *shape):
    return np.random.default_rng(seed).integers(0, spec.vocab_size, shape).astype(np.int32)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(models, family):
    loaded, torch_model = models(family)
    spec = loaded.spec
    tokens = _tokens(spec, 1, B, T)
    ours = logits_fn(spec, loaded.params, tokens, *full_rows(tokens))
    assert ours.shape == (B, T, spec.vocab_size)
    assert_logits_close(ours, torch_logits(torch_model, tokens), family)


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_requests_match_each_alone(models, family):
    """Row 0 packs requests a (10) and b (12); row 1 holds c (24). Each equals HF on it alone."""
    loaded, torch_model = models(family)
    spec = loaded.spec
    a, b, c = _tokens(spec, 2, 10), _tokens(spec, 3, 12), _tokens(spec, 4, T)
    tokens = np.zeros((B, T), np.int32)
    positions = np.zeros((B, T), np.int32)
    segment = np.zeros((B, T), np.int32)
    tokens[0, :10], tokens[0, 10:22], tokens[1] = a, b, c
    positions[0, :10], positions[0, 10:22], positions[1] = (
        np.arange(10),
        np.arange(12),
        np.arange(T),
    )
    segment[0, :10], segment[0, 10:22], segment[1] = 1, 2, 1
    ours = np.asarray(
        logits_fn(spec, loaded.params, tokens, positions, segment, np.zeros_like(segment))
    )
    assert np.isfinite(ours).all(), "padding rows must stay finite"
    assert_logits_close(ours[0, :10], torch_logits(torch_model, a[None])[0], "request a")
    assert_logits_close(ours[0, 10:22], torch_logits(torch_model, b[None])[0], "request b")
    assert_logits_close(ours[1], torch_logits(torch_model, c[None])[0], "request c")


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_context_matches_context_plus_child(models, family):
    """Context (8) + two children (5, 7) whose parent is the context, positions continuing it."""
    loaded, torch_model = models(family)
    spec = loaded.spec
    ctx, x, y = _tokens(spec, 5, 8), _tokens(spec, 6, 5), _tokens(spec, 7, 7)
    tokens = np.zeros((B, T), np.int32)
    positions = np.zeros((B, T), np.int32)
    segment = np.zeros((B, T), np.int32)
    parent = np.zeros((B, T), np.int32)
    tokens[0, :20] = np.concatenate([ctx, x, y])
    positions[0, :20] = np.concatenate([np.arange(8), np.arange(8, 13), np.arange(8, 15)])
    segment[0, :20] = [1] * 8 + [2] * 5 + [3] * 7
    parent[0, 8:20] = 1
    ours = np.asarray(logits_fn(spec, loaded.params, tokens, positions, segment, parent))
    assert np.isfinite(ours).all()
    with_x = torch_logits(torch_model, np.concatenate([ctx, x])[None])[0]
    with_y = torch_logits(torch_model, np.concatenate([ctx, y])[None])[0]
    assert_logits_close(ours[0, :8], with_x[:8], "context")
    assert_logits_close(ours[0, 8:13], with_x[8:], "child x")
    assert_logits_close(ours[0, 13:20], with_y[8:], "child y")


def test_sliding_window_is_exercised(models):
    """Sanity: with the window the logits differ from a full-attention run of the same weights."""
    import dataclasses

    loaded, _ = models("mistral")
    spec = loaded.spec
    assert set(spec.sliding_window) == {8}
    tokens = _tokens(spec, 8, B, T)
    windowed = np.asarray(logits_fn(spec, loaded.params, tokens, *full_rows(tokens)))
    full = dataclasses.replace(spec, sliding_window=(0,) * spec.num_layers)
    unwindowed = np.asarray(logits_fn(full, loaded.params, tokens, *full_rows(tokens)))
    np.testing.assert_allclose(windowed[:, :8], unwindowed[:, :8], rtol=1e-5, atol=1e-5)
    assert np.abs(windowed[:, 9:] - unwindowed[:, 9:]).max() > 1e-2


def test_gemma_families_exercise_their_features(models):
    g2 = models("gemma2")[0].spec
    assert g2.sliding_window == (8, 0) and g2.attn_softcap == 5.0 and g2.final_softcap == 10.0
    assert g2.attn_scale[0] == pytest.approx(24**-0.5)
    g3 = models("gemma3")[0].spec
    assert g3.sliding_window == (8, 0) and g3.qk_norm
    assert g3.rope[0].inv_freq != g3.rope[1].inv_freq  # local vs global (linear-scaled) bases
    neox = models("gpt_neox")[0].spec
    assert neox.rotary_dim == 4 and neox.residual == "parallel"

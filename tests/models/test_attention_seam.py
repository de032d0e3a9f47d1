"""The attention seam through whole models: every backend gives the reference's answers.

A tiny checkpoint is loaded through the real loading code and evaluated with `attention=xla` (the
reference) and with the platform backends the CPU can run:

- `tpu`: the Pallas TPU kernels in interpret mode (packed scoring rows with shared-context parents,
  a prefill's own keys after the cache's state, one-token decode over the cache), on one device and
  under `jax.shard_map` on an 8-device mesh;
- `gpu`: `jax.nn.dot_product_attention`'s XLA implementation under the packed mask (cuDNN's path
  needs an NVIDIA GPU: bench/device/ checks it there).

Llama (GQA 2:1) and Gemma-2 (sliding windows, soft-caps) on ARC-Easy (multiple choice: shared
contexts), LAMBADA, WikiText rolling windows and greedy generation: log-likelihoods within 1e-4
(float32), greedy flags and generated text identical, and the run's stats name the backend that ran.
"""

from __future__ import annotations

import pytest

from jaxeval.api.instance import Instance
from jaxeval.lm.jax_lm import JaxLM
from tests.helpers.tiny_models import tiny_checkpoint
from tests.lm import workloads

pytestmark = pytest.mark.slow

TOL = 1e-4
MAX_LENGTH = 256  # rows of 256 tokens: the kernels' blocks of 128, not the dense short-row path


def _instances(kind, args):
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def _answers(family: str, data_root, attention: str, mesh="single", *, lone=False) -> dict:
    """The answers of every request kind (`lone`: also one prompt generated alone: an admission
    of one row, fewer than a sharded mesh's batch devices)."""
    lm = JaxLM(
        pretrained=tiny_checkpoint(family),
        dtype="float32",
        mesh=mesh,
        max_length=MAX_LENGTH,
        attention=attention,
        buckets=[(MAX_LENGTH, MAX_LENGTH)],
        token_budget=4 * MAX_LENGTH,
        max_gen_toks=12,
    )
    ll = workloads.arc_easy(data_root, 4) + workloads.lambada(data_root, 4)
    rolling = workloads.wikitext_pages(data_root, 2, chars=1600)
    gen = [(ctx, {"until": ["\n\n"], "max_gen_toks": 12, "do_sample": False}) for ctx, _ in ll[::5]]
    # a prompt of about 170 tokens (its prefill: the packed kernel), generated alone
    lone_gen = [(rolling[0][0][:700], {"until": ["\n\n"], "max_gen_toks": 12, "do_sample": False})]
    lone_text = lm.generate_until(_instances("generate_until", lone_gen), True) if lone else None
    return {
        "lone": lone_text,
        "loglikelihood": lm.loglikelihood(_instances("loglikelihood", ll), True),
        "rolling": lm.loglikelihood_rolling(_instances("loglikelihood_rolling", rolling), True),
        "generate": lm.generate_until(_instances("generate_until", gen), disable_tqdm=True),
        "backend": lm.model_info()["attention"],
    }


_REFERENCE: dict[str, dict] = {}


def _reference(family, data_root, lone=False):
    if family not in _REFERENCE or (lone and _REFERENCE[family]["lone"] is None):
        _REFERENCE[family] = _answers(family, data_root, "xla", lone=lone)
    return _REFERENCE[family]


def _assert_same(got: dict, want: dict) -> None:
    import numpy as np

    for kind in ("loglikelihood",):
        a = np.array([x for x, _ in got[kind]])
        b = np.array([x for x, _ in want[kind]])
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)
        assert [g for _, g in got[kind]] == [g for _, g in want[kind]]
    np.testing.assert_allclose(got["rolling"], want["rolling"], rtol=1e-6, atol=TOL)
    assert got["generate"] == want["generate"]


# The kernels each backend must have traced (the functions behind the seam).
KERNELS = {
    "tpu": [("tpu_packed", "packed_attention"), ("tpu_decode", "decode_state")],
    "gpu": [("gpu", "fused_attend")],
}


@pytest.fixture
def traced(monkeypatch):
    """Counts the calls (traces) of the kernel entry points in `KERNELS`."""
    import importlib

    counts: dict[str, int] = {}
    for module, name in {pair for pairs in KERNELS.values() for pair in pairs}:
        mod = importlib.import_module(f"jaxeval.ops.attention.{module}")
        real = getattr(mod, name)

        def counted(*a, _real=real, _name=name, **kw):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*a, **kw)

        monkeypatch.setattr(mod, name, counted)
    return counts


@pytest.mark.parametrize("family", ["llama", "gemma2"])
@pytest.mark.parametrize("attention", ["tpu", "gpu"])
def test_backend_equals_reference(family, attention, data_root, traced):
    want = _reference(family, data_root)
    assert want["backend"] == "xla"
    assert any(text.strip() for text in want["generate"])  # generation is not trivially empty
    traced.clear()
    got = _answers(family, data_root, attention)
    assert got["backend"] == attention
    # every kernel ran, except cuDNN's path under Gemma-2's soft-cap (the reference, by design)
    expected = [n for _, n in KERNELS[attention] if not (family == "gemma2" and attention == "gpu")]
    assert all(traced.get(n, 0) > 0 for n in expected), traced
    _assert_same(got, want)


def test_tpu_kernels_sharded_on_eight_devices(data_root, traced):
    """Rows over `data` (4) and the 2 kv heads over `model` (2) of the 8 CPU devices: each
    device's kernels see its own rows and heads through `jax.shard_map`."""
    import jax

    from jaxeval.platform.mesh import make_mesh

    if len(jax.devices()) < 8:
        pytest.fail("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py)")
    got = _answers("llama", data_root, "tpu", mesh=make_mesh("data_model", model=2), lone=True)
    assert got["backend"] == "tpu"
    assert got["lone"] == _reference("llama", data_root, lone=True)["lone"]
    assert all(traced.get(n, 0) > 0 for _, n in KERNELS["tpu"]), traced
    _assert_same(got, _reference("llama", data_root))

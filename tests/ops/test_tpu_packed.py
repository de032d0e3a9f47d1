"""The Pallas TPU packed-attention kernel computes `attention.attend` under the packing rule.

On the CPU in Pallas's interpreter: float32 within 2e-6 and bfloat16 within 2e-2 (absolute, per
element, real queries only) of dense float32 attention under `packed_mask & window_mask`, at real
head shapes (E = 64 with GQA 3:1, E = 128 with 8:1, DeepSeek's E = 192), with windows, soft-caps,
shared-context children, padding tails, a request shorter than one block and T not a multiple of
the block; with an `init` state over earlier keys; and in the TPU simulator. Block skipping: the
docstring's drawn visibility, and keys of a skipped block set to NaN never reach an output. For a
TPU v5e: the kernel compiles (a `tpu_custom_call`) and declares about the causal half of dense
attention's FLOPs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxeval.errors import JaxevalError
from jaxeval.models import attention as attn
from jaxeval.models.attention import reference
from jaxeval.ops.attention import tpu_packed as tp
from jaxeval.plan.topology import libtpu_available
from tests.helpers.tpu import single_tpu_mesh


def _rows(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two rows of T (>= 280) tokens -> segment, parent, positions [2, T].

    Row 0: a request (seg 1, 70 tokens), a shared context c (seg 2, 60) with children x (seg 3,
    25) and y (seg 4, 30) continuing c's positions, a request (seg 5, 90), padding. Row 1: a request
    of 40 tokens (less than a block), then padding (whole blocks of it).
    """
    seg, par, pos = (np.zeros((2, t), np.int32) for _ in range(3))
    at = 0
    for s, n, p, p0 in [
        (1, 70, 0, 0),
        (2, 60, 0, 0),
        (3, 25, 2, 60),
        (4, 30, 2, 60),
        (5, 90, 0, 0),
    ]:
        seg[0, at : at + n], par[0, at : at + n] = s, p
        pos[0, at : at + n] = np.arange(p0, p0 + n)
        at += n
    seg[1, :40], pos[1, :40] = 1, np.arange(40)
    return seg, par, pos


def _qkv(seed, b, t, h, g, e, dtype, s=None):
    rng = np.random.default_rng(seed)
    s = t if s is None else s
    shapes = [(b, t, h, e), (b, s, g, e), (b, s, g, e)]
    return [jnp.asarray(rng.normal(size=x), jnp.float32).astype(dtype) for x in shapes]


# The interpreted kernels and the references are CPU programs that run once: compiled without
# LLVM's optimisations, which halves the tests' compile time.
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})


@functools.partial(_jit, static_argnames=("softcap",))
def _dense(q, k, v, allowed, scale, softcap):
    """The reference: dense float32 attention under `allowed` [B, T, J]."""
    f32 = [a.astype(jnp.float32) for a in (q, k, v)]
    return attn.attend(*f32, allowed, scale=scale, softcap=softcap)


def _allowed(segment, parent, positions, window=attn.NO_WINDOW):
    """The packing rule and the window, densely: [B, T, T]."""
    return np.asarray(
        attn.packed_mask(segment, parent) & attn.window_mask(positions, positions, window)
    )


def _error(actual, expected, segment) -> float:
    """Max |actual - expected| over the real (segment != 0) queries."""
    d = np.abs(np.asarray(actual, np.float32) - np.asarray(expected, np.float32))
    return float(d[np.asarray(segment) != 0].max())


CASES = [  # (heads, kv heads, head dim, window, softcap, dtype, tolerance)
    (9, 3, 64, 48, None, jnp.float32, 2e-6),  # SmolLM2's GQA 3:1, a sliding window
    (8, 1, 128, 48, 50.0, jnp.bfloat16, 2e-2),  # GQA 8:1, window and Gemma-2's soft-cap
    (2, 2, 192, attn.NO_WINDOW, None, jnp.float32, 2e-6),  # DeepSeek MLA: E = 128 + 64
]


@pytest.mark.parametrize("h,g,e,window,softcap,dtype,tol", CASES)
def test_kernel_matches_dense_attention(h, g, e, window, softcap, dtype, tol):
    t = 300  # three blocks of 128, the last padded
    seg, par, pos = _rows(t)
    q, k, v = _qkv(h + e, 2, t, h, g, e, dtype)
    scale = jnp.float32(e**-0.5)

    @_jit
    def kernel(q, k, v, window, scale):
        return tp.packed_attention(
            q, k, v, attn.Mask(seg, par, pos, window), scale=scale, softcap=softcap,
            interpret=True,
        )  # fmt: skip

    out = kernel(q, k, v, jnp.int32(window), scale)
    assert out.shape == (2, t, h, e) and out.dtype == dtype
    expected = _dense(q, k, v, _allowed(seg, par, pos, window), scale, softcap)
    assert _error(out, expected, seg) <= tol


def test_init_continues_from_earlier_keys():
    """`init` (an online-softmax state over a prefix of earlier keys) then the row's own keys equals
    dense attention over prefix + row (float32, GQA 8:1, E = 128, soft-capped)."""
    b, t, h, g, e, p, softcap = 2, 300, 8, 1, 128, 40, 50.0
    seg, par, pos = _rows(t)
    q, k, v = _qkv(7, b, t, h, g, e, jnp.float32)
    _, k_pre, v_pre = _qkv(8, b, t, h, g, e, jnp.float32, s=p)
    scale, x = jnp.float32(e**-0.5), h // g
    # row 0 sees the whole prefix, row 1 its first 25 keys; padding sees nothing
    pre_ok = (seg != 0)[:, :, None] & (np.arange(p) < np.array([p, 25])[:, None])[:, None, :]

    @_jit
    def kernel(q, k, v, k_pre, v_pre):
        scores = reference._scores(
            q.reshape(b, t, g, x, e), k_pre, scale, softcap
        )  # [B, G, X, T, J]
        init = reference._Online.update(
            reference._Online.init((b, g, x, t), e), scores, pre_ok[:, None, None], v_pre,
            "bgrtj,bjge->bgrte",
        )  # fmt: skip
        return tp.packed_attention(
            q, k, v, attn.Mask(seg, par, pos), scale=scale, softcap=softcap, init=init,
            interpret=True,
        )  # fmt: skip

    out = kernel(q, k, v, k_pre, v_pre)
    allowed = np.concatenate([pre_ok, _allowed(seg, par, pos)], axis=2)
    keys, values = jnp.concatenate([k_pre, k], 1), jnp.concatenate([v_pre, v], 1)
    assert _error(out, _dense(q, keys, values, allowed, scale, softcap), seg) <= 2e-6


def test_drawn_visibility():
    """The module docstring's two rows, in blocks of 2."""
    a, b, c, x = 1, 2, 3, 4
    seg = np.array([[a, a, a, b, b, c, c, x], [a] * 8], np.int32)
    par = np.array([[0, 0, 0, 0, 0, 0, 0, c], [0] * 8], np.int32)
    pos = np.array([[0, 1, 2, 0, 1, 0, 1, 2], list(range(8))], np.int32)

    @_jit
    def tables(seg, par, pos):
        visible = tp.row_visibility(attn.Mask(seg, par, pos), block=2)
        first, last = tp.visit_range(visible)
        reads = tp.key_block(jnp.arange(4)[None, None], first[..., None], last[..., None])
        return visible, first, last, reads, tp.pack_visibility(visible)

    visible, first, last, reads, words = (np.asarray(a) for a in tables(seg, par, pos))
    drawn = ["#...", "##..", ".##.", "..##"]
    assert (visible[0] == np.array([[ch == "#" for ch in r] for r in drawn])).all()
    assert (visible[1] == np.tri(4, dtype=bool)).all()
    assert first.tolist() == [[0, 0, 1, 2], [0, 0, 0, 0]]
    assert last.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert reads[0].tolist() == [[0, 0, 0, 0], [0, 1, 1, 1], [1, 1, 2, 2], [2, 2, 2, 3]]
    assert words.reshape(2, 4)[0].tolist() == [0b0001, 0b0011, 0b0110, 0b1100]


def test_blocks_are_lane_multiples():
    q = jnp.zeros((1, 100, 2, 64))
    seg = jnp.ones((1, 100), jnp.int32)
    with pytest.raises(JaxevalError, match="multiples of 128"):
        tp.packed_attention(
            q, q, q, attn.Mask(seg, seg, seg), scale=1.0, softcap=None, block=64, interpret=True
        )


def test_skipped_blocks_are_never_read():
    """A request of one block, then one of 100 tokens and padding: the cross-request block pair is
    invisible, never fetched (key step 0 of query block 1 reads block 1) and never computed: with
    the first request's keys and values NaN, the second's state is exact, and padding queries keep
    the initial online-softmax state. In the TPU simulator (uninitialised VMEM is NaN there too)."""
    t, h, g, e = 256, 2, 1, 128
    seg = np.zeros((1, t), np.int32)
    seg[0, :128], seg[0, 128:228] = 1, 2
    par = np.zeros_like(seg)
    pos = np.concatenate([np.arange(128), np.arange(128)])[None].astype(np.int32)
    q, k, v = _qkv(3, 1, t, h, g, e, jnp.float32)
    scale = jnp.float32(e**-0.5)

    @_jit
    def kernel(q, k, v):
        visible = tp.row_visibility(attn.Mask(seg, par, pos), block=128)
        first, last = tp.visit_range(visible)
        reads = tp.key_block(jnp.arange(2), first[0, 1], last[0, 1])
        poisoned = [a.at[:, :128].set(jnp.nan) for a in (k, v)]
        state = tp.packed_state(
            q, *poisoned, attn.Mask(seg, par, pos), scale=scale, softcap=None,
            interpret=pltpu.InterpretParams(),
        )  # fmt: skip
        return visible, reads, state

    visible, reads, (m, total, acc) = kernel(q, k, v)
    assert np.asarray(visible)[0].tolist() == [[True, False], [False, True]]
    assert np.asarray(reads).tolist() == [1, 1]
    out = np.asarray(reference._Online.finish((m, total, acc), jnp.float32).reshape(1, t, h, e))
    expected = np.asarray(_dense(q, k, v, _allowed(seg, par, pos), scale, None))
    assert np.isfinite(out[0, 128:]).all()
    assert np.abs(out[0, 128:228] - expected[0, 128:228]).max() <= 2e-6
    m, total, acc = (np.asarray(a)[..., 228:, :] for a in (m[..., None], total[..., None], acc))
    assert (m == attn.MASKED).all() and (total == 0).all() and (acc == 0).all()


tpu = pytest.mark.skipif(not libtpu_available(), reason="needs libtpu (compiles for a TPU v5e)")


def _abstract(mesh, *shapes_dtypes):
    sharding = NamedSharding(mesh, P())
    return [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in shapes_dtypes]


@tpu
def test_compiles_for_tpu_with_its_declared_cost():
    """B = 8 rows of T = 2,048, 32 query heads on 8 kv heads of E = 128, bf16, on one TPU v5e: the
    kernel plain, with a window and a soft-cap, and continuing an `init` state, in one program:
    three Mosaic custom calls, each declaring the causal blocks' FLOPs (about half of dense)."""
    b, t, h, g, e = 8, 2048, 32, 8, 128
    x = h // g
    mesh = single_tpu_mesh("v5e-8")
    args = _abstract(
        mesh, ((b, t, h, e), jnp.bfloat16), ((b, t, g, e), jnp.bfloat16),
        ((b, t, g, e), jnp.bfloat16), ((b, t), jnp.int32), ((), jnp.float32), ((), jnp.int32),
        ((b, g, x, t), jnp.float32), ((b, g, x, t, e), jnp.float32),
    )  # fmt: skip

    def variants(q, k, v, seg, scale, window, m, acc):
        mask = attn.Mask(seg, seg, seg)
        plain = tp.packed_attention(q, k, v, mask, scale=scale, softcap=None)
        capped = tp.packed_attention(
            q, k, v, mask._replace(window=window), scale=scale, softcap=50.0
        )
        continued = tp.packed_attention(q, k, v, mask, scale=scale, softcap=None, init=(m, m, acc))
        return plain, capped, continued

    compiled = jax.jit(variants).lower(*args).compile()
    assert compiled.as_text().count("tpu_custom_call") >= 3
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    dense = 4 * b * h * t * t * e
    n = t // 128
    assert 3 * 0.5 * dense <= cost["flops"] <= 3 * 0.5 * dense * (n + 1) / n * 1.01
    assert cost["bytes accessed"] >= 3 * 2 * b * t * (h + 2 * g) * e  # q, k, v, out at least


@tpu
def test_blocks_fit_the_tpu_vmem_at_eight_heads_per_kv_head():
    """Llama-3-70B's attention (64 query heads on 8 kv heads of 128, rows of 2,048, bf16) on one
    TPU v5e chip: in blocks of 512 a program's 4,096 query rows overflow the scoped VMEM;
    `fit_block` halves the block to 256 (2,048 rows) and the kernel compiles."""
    b, t, h, g, e = 1, 2048, 64, 8, 128
    mesh = single_tpu_mesh("v5e-8")
    args = _abstract(
        mesh, ((b, t, h, e), jnp.bfloat16), ((b, t, g, e), jnp.bfloat16),
        ((b, t, g, e), jnp.bfloat16), ((b, t), jnp.int32), ((), jnp.float32),
    )  # fmt: skip

    def compiled(block):
        def fn(q, k, v, seg, scale):
            return tp.packed_attention(
                q, k, v, attn.Mask(seg, seg, seg), scale=scale, softcap=None, block=block
            )

        return jax.jit(fn).lower(*args).compile()

    assert [tp.fit_block(512, x) for x in (1, 3, 4, 8, 16)] == [512, 512, 512, 256, 128]
    with pytest.raises(Exception, match="vmem"):
        compiled(512)
    assert "tpu_custom_call" in compiled(tp.fit_block(512, h // g)).as_text()

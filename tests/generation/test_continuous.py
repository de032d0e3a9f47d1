"""Continuous batching and shared-prefix prefill (`jaxeval.lm.generate.engine`, `jaxeval/kernels/continuous.py`).

- a row refilled mid-batch (2 engine rows, 6 requests of different lengths) gives the tokens it
  gives alone, and the static-batch path's;
- a shared prefix's keys/values equal the full prompt's recomputation (float32) and the greedy
  tokens are identical with and without sharing;
- sampled tokens do not depend on the refill order or on the rows beside them;
- compilations stay within the bucket shapes and a rerun in any order compiles nothing;
- the queue's tail moves its live rows into smaller engines without changing a token;
- `forward_new` (a prefill that returns its keys instead of writing a cache) equals
  `forward_cached`, and a model without it takes the cache path to the same tokens.
"""

from __future__ import annotations

import functools
import types

import numpy as np
import pytest

pytestmark = pytest.mark.slow

WORDS = "the quick brown fox jumps over a lazy dog while seven cats watch from the old wall".split()
PREFIX = "Answer each question. " + " ".join(WORDS * 3) + "\n"
SAMPLED = {"do_sample": True, "temperature": 1.3, "top_k": 40, "top_p": 0.95}


@functools.cache
def llama():
    from transformers import AutoTokenizer

    from jaxeval.models import load_model
    from tests.helpers.tiny_models import tiny_checkpoint

    path = tiny_checkpoint("llama")
    return load_model(path), AutoTokenizer.from_pretrained(path)


@functools.cache
def generator(batch_size: int = 2, continuous: bool = True, min_prefix: int = 0):
    from jaxeval.lm.generate.generator import Generator

    model, tok = llama()
    return Generator(
        model=model,
        tokenizer=tok,
        max_length=128,
        batch_size=batch_size,
        continuous=continuous,
        min_prefix=min_prefix,
        refill_rows=1,
        shrink_last_batch=False,
    )


def prompts_between(lo: int, hi: int, n: int) -> list[str]:
    """n prompts of lo..hi tokens (one prompt bucket, so one cache shape for every run)."""
    _, tok = llama()
    rng = np.random.default_rng(0)
    out = []
    while len(out) < n:
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 30)))).capitalize()
        if lo <= len(tok(text)["input_ids"]) <= hi:
            out.append(text)
    return out


def greedy_requests() -> list[tuple[str, dict]]:
    budgets = (16, 3, 9, 16, 5, 12)  # rows end at different steps: the engine refills mid-batch
    return [
        (p, {"max_gen_toks": n, "until": ["zzz"]})
        for p, n in zip(prompts_between(17, 32, 6), budgets)
    ]


def test_refilled_rows_equal_alone_and_static():
    gen = generator()
    requests = greedy_requests()
    together = gen.generate_tokens(requests)
    assert gen.stats["engine_rows"] == 2 and gen.stats["admissions"] >= 4  # refilled mid-batch
    assert gen.stats["tail_moves"] == 1  # the last live row finished in a 1-row engine
    alone = [gen.generate_tokens([r])[0] for r in requests]
    assert together == alone
    assert together == generator(batch_size=8, continuous=False).generate_tokens(requests)
    assert [len(t) for t in together] == [16, 3, 9, 16, 5, 12]


def test_tail_moves_keep_every_token():
    """8 rows ending at 16, 3, 9, 14, 5, 12, 2, 7 tokens: 8 -> 4 -> 2 -> 1 engine rows once the
    queue is empty; greedy and sampled tokens equal the run without moves and the static path."""
    from jaxeval.lm.generate.generator import Generator

    model, tok = llama()
    budgets = (16, 3, 9, 14, 5, 12, 2, 7)
    prompts = prompts_between(17, 32, 8)
    for kwargs in ({"until": ["zzz"]}, SAMPLED):
        requests = [(p, {**kwargs, "max_gen_toks": n}) for p, n in zip(prompts, budgets)]
        runs = {}
        for tail in (True, False):
            gen = Generator(
                model=model, tokenizer=tok, max_length=128, batch_size=8, tail=tail, min_prefix=0
            )
            runs[tail] = gen.generate_tokens(requests)
            assert gen.stats["engine_rows"] == 8
            assert gen.stats["tail_moves"] == (3 if tail else 0)
        assert runs[True] == runs[False]
        assert [len(t) for t in runs[True]] == list(budgets)
        static = generator(batch_size=8, continuous=False).generate_tokens(requests)
        assert runs[True] == static


def test_tail_rows_and_threshold():
    from jaxeval.lm.generate.schedule import tail_rows, tail_threshold

    assert [tail_rows(n, 8, 1) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    assert [tail_rows(n, 12, 1) for n in (3, 4, 5, 6)] == [4, 4, 12, 12]  # 8 is over half of 12
    assert [tail_rows(n, 8, 2) for n in (1, 2, 3, 4, 5)] == [2, 2, 4, 4, 8]  # multiples of shards
    assert tail_rows(1, 2, 2) == 2 and tail_threshold(2, 2) == 0  # one row a shard: no move
    assert [tail_threshold(r, 1) for r in (1, 2, 3, 4, 8, 12, 16)] == [0, 1, 1, 2, 4, 4, 8]
    for rows in range(1, 33):
        for shards in (1, 2, 4):
            low = tail_threshold(rows, shards)
            for live in range(1, rows + 1):  # a move happens exactly at or below the threshold
                assert (tail_rows(live, rows, shards) < rows) == (live <= low)


def test_shared_prefix_kv_equals_recomputation():
    import jax
    import jax.numpy as jnp

    from jaxeval.kernels.continuous import prefill_prefix
    from jaxeval.lm.encoding import Encoder
    from jaxeval.models.contract import SLOT_AXES

    model, tok = llama()
    spec, params = model.spec, model.params
    ids = Encoder(tok).tok_encode(PREFIX + "Q: what does the fox do?\nA:")
    s, n = 40, len(ids)
    assert n > s + 4

    @jax.jit
    def both(tokens):
        pos = jnp.arange(n, dtype=jnp.int32)[None]
        full = spec.init_cache(1, n)
        h_full, full = spec.forward_cached(
            params, full, tokens[None], pos, jnp.ones((1, n), bool), 0
        )
        prefix = prefill_prefix(params, tokens[:s], jnp.ones((s,), bool), model=spec)
        rest = spec.init_cache(1, n - s)
        shared = jax.tree.map(
            lambda a, b, axis: jnp.concatenate([a, b], axis=axis), prefix, rest, SLOT_AXES
        )
        h_sh, shared = spec.forward_cached(
            params, shared, tokens[None, s:], pos[:, s:], jnp.ones((1, n - s), bool), s
        )
        return full, shared, spec.head(params, h_full[:, -1]), spec.head(params, h_sh[:, -1])

    full, shared, logits_full, logits_shared = both(jnp.asarray(ids, jnp.int32))
    np.testing.assert_allclose(shared.k, full.k, rtol=1e-5, atol=1e-5)  # entries O(1)
    np.testing.assert_allclose(shared.v, full.v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits_shared, logits_full, rtol=1e-5, atol=1e-5)
    assert bool(jnp.all(shared.valid == full.valid)) and bool(
        jnp.all(shared.positions == full.positions)
    )


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_forward_new_equals_forward_cached(family):
    """`forward_new` after a 1-row prefix (and with no prefix) gives the hidden states and keys /
    values `forward_cached` writes, for every query row, padding included (gemma2: a window)."""
    import jax
    import jax.numpy as jnp

    from jaxeval.kernels.continuous import prefill_prefix
    from jaxeval.models import load_model
    from tests.helpers.tiny_models import tiny_checkpoint

    model = load_model(tiny_checkpoint(family))
    spec, params = model.spec, model.params
    rng = np.random.default_rng(1)
    u, s, p = 3, 21, 40  # 3 rows, a 21-token prefix (in 32 slots), suffixes of up to 40 tokens
    ids = rng.integers(3, spec.vocab_size, size=(u, s + p)).astype(np.int32)
    ids[:, :s] = ids[0, :s]
    lengths = np.array([40, 17, 1])
    valid = np.arange(p)[None, :] < lengths[:, None]

    @jax.jit
    def both(ids, valid):
        pre = jnp.zeros(32, jnp.int32).at[:s].set(ids[0, :s])
        prefix = prefill_prefix(params, pre, jnp.arange(32) < s, model=spec)
        pos = s + jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (u, p))
        h_new, k_new, v_new = spec.forward_new(params, prefix, ids[:, s:], pos, valid, s)
        cache = spec.init_cache(u, s + p)
        full_valid = jnp.concatenate([jnp.ones((u, s), bool), valid], axis=1)
        full_pos = jnp.broadcast_to(jnp.arange(s + p, dtype=jnp.int32), (u, s + p))
        h, cache = spec.forward_cached(params, cache, ids, full_pos, full_valid, 0)
        empty = spec.init_cache(1, 0)
        h0, k0, v0 = spec.forward_new(params, empty, ids[:, s:], pos - s, valid, 0)
        alone = spec.init_cache(u, p)
        h1, alone = spec.forward_cached(params, alone, ids[:, s:], pos - s, valid, 0)
        return (h_new, k_new, v_new, h[:, s:], cache), (h0, k0, v0, h1, alone)

    (h_new, k_new, v_new, h_full, cache), (h0, k0, v0, h1, alone) = both(ids, valid)
    for hn, kn, vn, hf, c, off in (
        (h_new, k_new, v_new, h_full, cache, s),
        (h0, k0, v0, h1, alone, 0),
    ):
        keys = np.asarray(c.k)[..., off:].transpose(0, 1, 4, 2, 3)  # [L, U, P, G, E]
        values = np.asarray(c.v)[..., off:, :].transpose(0, 1, 3, 2, 4)
        for row, n in enumerate(lengths):  # padding positions differ in what they see: real ones
            np.testing.assert_allclose(hn[row, :n], hf[row, :n], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(kn[:, row, :n], keys[:, row, :n], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(vn[:, row, :n], values[:, row, :n], rtol=1e-5, atol=1e-5)


def test_model_without_forward_new_gives_the_same_tokens():
    """The contract's model (forward_cached only, `per_row_cache_index`) admits through a U-row
    cache (`_forward_new_via_cache`) to the tokens our decoders get with `forward_new`."""
    import dataclasses

    from jaxeval.lm.generate.generator import Generator

    model, tok = llama()

    @dataclasses.dataclass(frozen=True)
    class CachedOnly:
        inner: object
        per_row_cache_index = True

        def __getattr__(self, name):
            if name == "forward_new":
                raise AttributeError(name)
            return getattr(self.inner, name)

    wrapped = types.SimpleNamespace(**vars(model))
    wrapped.spec = CachedOnly(model.spec)
    assert not hasattr(wrapped.spec, "forward_new")
    requests = [
        (PREFIX + q, {"max_gen_toks": 8, "until": ["zzz"]})
        for q in ("Q: what jumps?\nA:", "Q: who watches?\nA:", "Q: why?\nA:")
    ]
    kw = dict(tokenizer=tok, max_length=128, batch_size=2, min_prefix=16, refill_rows=1)
    cached_only = Generator(model=wrapped, **kw)
    assert cached_only.continuous
    got = cached_only.generate_tokens(requests)
    assert cached_only.stats["prefix_tokens"] > 0
    assert got == Generator(model=model, **kw).generate_tokens(requests)


def test_shared_prefix_gives_identical_greedy_strings():
    requests = [
        (PREFIX + q, {"max_gen_toks": 8, "until": ["zzz"]})
        for q in ("Q: what jumps?\nA:", "Q: who watches?\nA:", "Q: where?\nA:", "Q: why?\nA:")
    ]
    sharing = generator(batch_size=2, min_prefix=16)
    with_prefix = sharing.generate_until(requests, disable_tqdm=True)
    assert sharing.stats["prefix_tokens"] > 0
    assert sharing.stats["prefill_tokens"] < sharing.stats["prompt_tokens"]
    assert with_prefix == generator().generate_until(requests, disable_tqdm=True)


def test_sampling_invariant_under_refill_order():

    prompts = prompts_between(17, 32, 4)
    requests = [(p, {**SAMPLED, "max_gen_toks": n}) for p, n in zip(prompts, (12, 4, 9, 6))]
    gen = generator()
    forward = gen.generate_tokens(requests)  # longest expected output admitted first
    gen.admission = "request"
    try:
        in_order = gen.generate_tokens(requests)  # another refill order, other neighbours
    finally:
        gen.admission = "longest"
    assert forward == in_order
    assert forward == generator(batch_size=8, continuous=False).generate_tokens(requests)
    assert len(set(map(tuple, forward))) == 4
    # two copies of each (lm-eval repeats): each copy is its own sample, in any composition
    pairs = [r for r in requests for _ in range(2)]
    same = [2 * (i // 2) for i in range(len(pairs))]
    copies = gen.generate_tokens(pairs, same=same)
    assert copies[::2] == forward  # copy 0 of a request is the request's own sample
    assert copies[1::2] != copies[::2]


def test_compile_count_bounded_by_buckets():
    from jaxeval.lm.generate.plan import prefill_bucket

    gen = generator(batch_size=2, min_prefix=16)
    requests = greedy_requests() + [(PREFIX + "Q: why?\nA:", {"max_gen_toks": 8})] * 2
    gen.generate_tokens(requests)
    count = gen.compile_count
    for order in (requests[::-1], requests[1::2] + requests[::2], requests):
        gen.generate_tokens(order)
    assert gen.compile_count == count  # same engine shape: every order reuses the executables
    keys = set(gen.executables.keys())

    def of(kind: str) -> set:
        return {k for k in keys if k.kind == kind}

    engines = {(k.engine.rows, k.engine.slots, k.engine.n_new) for k in of("decode")}
    inits, shrinks, admits, prefixes = of("init"), of("shrink"), of("admit"), of("prefix")
    # the engines: B = 2 rows, and 1 row for the tail; one move between them
    assert {e[0] for e in engines} == {2, 1} and len(inits) == 1
    assert {(k.rows, k.target) for k in shrinks} == {(2, 1)}
    # the bound: per engine shape decode + peek (+ init for the first, + a move to a smaller one),
    # one prefix prefill per prefix bucket, and one admit per (U <= R in powers of two <= B,
    # prefix bucket or 0, suffix bucket)
    buckets = sorted({prefill_bucket(n) for n in range(1, 129)})
    rows_pairs = [(u, r) for r in (1, 2) for u in (1, 2) if u <= r]
    prefix_buckets = [0] + [k.width for k in prefixes]
    bound = len(engines) * (3 + len(rows_pairs) * len(prefix_buckets) * len(buckets)) + len(
        prefixes
    )
    assert all(
        (k.admitted, k.admit_rows) in rows_pairs
        and k.prefix_width in prefix_buckets
        and k.width in buckets
        for k in admits
    )
    count = 2 * len(engines) + len(inits) + len(shrinks) + len(admits) + len(prefixes)
    assert gen.compile_count == count <= bound


@pytest.mark.parametrize("family", ["gemma2"])
def test_sliding_window_family_refill(family):
    """A sliding-window family (per-row window on positions): refilled rows equal static batches."""
    from transformers import AutoTokenizer

    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model
    from tests.helpers.tiny_models import tiny_checkpoint

    path = tiny_checkpoint(family)
    model, tok = load_model(path), AutoTokenizer.from_pretrained(path)
    requests = [
        (p, {"max_gen_toks": n})
        for p, n in zip(["Hello there", "A B C D E F G"] * 2, (12, 3, 7, 10))
    ]
    cont = Generator(model=model, tokenizer=tok, max_length=128, batch_size=2, refill_rows=1)
    static = Generator(model=model, tokenizer=tok, max_length=128, batch_size=8, continuous=False)
    assert cont.generate_tokens(requests) == static.generate_tokens(requests)


def test_admission_chunks_bound_the_padded_prefill():
    """Long prompts prefill alone or in pairs within ADMIT_TOKENS; short ones batch; copies of a
    prompt stay in one call; every item is admitted once, in queue order (the docstring's case)."""
    from jaxeval.lm.generate.plan import pow2_at_least, prefill_bucket
    from jaxeval.lm.generate.schedule import Item, admission_chunks
    from jaxeval.lm.generate.sizing import ADMIT_TOKENS

    def item(n, copy=0, prompt=None):
        pr = prompt or types.SimpleNamespace(tokens=tuple(range(n)))
        return Item(pr, copy, 0, 0)

    long = [item(n) for n in (1233, 1006, 953, 858)]
    chunks = admission_chunks(long, 0)
    assert [[len(it.prompt.tokens) for it in c] for c in chunks] == [[1233], [1006, 953], [858]]
    shared = item(50)
    short = [item(50) for _ in range(39)] + [shared, item(50, 1, shared.prompt)]
    chunks = admission_chunks(short, 0)
    assert [len(c) for c in chunks] == [32, 9]  # 32 x 64 = ADMIT_TOKENS; the copy joins its prompt
    for items in (long, short):
        chunks = admission_chunks(items, 0)
        assert [it for c in chunks for it in c] == items
        for c in chunks:
            prompts = {id(it.prompt) for it in c}
            width = prefill_bucket(max(len(it.prompt.tokens) for it in c))
            assert len(prompts) == 1 or pow2_at_least(len(prompts), 1) * width <= ADMIT_TOKENS


def test_prefill_bucket_is_finer_than_prompt_bucket():
    from jaxeval.lm.generate.plan import prefill_bucket, prompt_bucket

    assert [prefill_bucket(n) for n in (100, 257, 858, 1233, 5000)] == [128, 320, 896, 1280, 5120]
    assert all(n <= prefill_bucket(n) <= prompt_bucket(n) for n in range(1, 20000))
    assert all(prefill_bucket(n) < 1.25 * n for n in range(257, 20000))  # under a quarter octave

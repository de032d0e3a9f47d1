"""The continuous engine's rows from the memory left (`jaxeval.lm.generate.sizing`).

- the cache bytes are `init_cache`'s, per device, for every family's cache layout;
- default rows halve until the engine fits half the free memory, never below the batch shards;
- an explicit row count is kept when it fits, else refused with the largest count that fits
  (that count fits, one shard more does not); a shape that fits at no size says so;
- in a run, rows cut to the memory generate the same tokens as the uncut engine; an explicit
  `gen_batch_size` that does not fit fails, one that fits all of the memory is kept;
- `gen_batch_size` given to the model adapter is explicit, lm-eval's batch size is not.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate import sizing
from jaxeval.lm.generate.sizing import cache_row_bytes, engine_fit, engine_rows
from jaxeval.models.families import spec_from_config
from tests.helpers import tiny_models

MIB = 1 << 20


@functools.cache
def spec(model_type: str = "llama"):
    return spec_from_config(tiny_models._config(model_type, 512, 1, 2, {}))


def leaf_bytes(tree) -> int:
    return int(sum(np.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)))


@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3", "gemma2", "gpt_oss"])
def test_cache_bytes_are_init_caches(model_type):
    s = spec(model_type)
    whole = leaf_bytes(jax.eval_shape(lambda: s.init_cache(8, 256)))
    assert cache_row_bytes(s, 256) * 8 == whole
    fit = engine_fit(s, rows=8, slots=256, shards=4, free_bytes=None)
    assert fit.cache_bytes == whole // 4


def test_default_rows_halve_to_half_the_free_memory():
    s = spec()
    fixed = engine_fit(s, rows=2, slots=512, shards=2, free_bytes=None).temp_bytes
    per_local = engine_fit(s, rows=2, slots=512, shards=2, free_bytes=None).total_bytes - fixed
    # room for 5 rows per device at half the memory: 64 wanted -> 8 (4 per device)
    free = int(2 * (fixed + 5 * per_local))
    fit = engine_rows(s, free_bytes=free, shards=2, slots=512, wanted=64)
    assert fit.rows == 8
    assert fit.total_bytes <= sizing.ENGINE_SHARE * free
    assert engine_fit(s, rows=16, slots=512, shards=2, free_bytes=free).total_bytes > free / 2
    # plenty of memory: the rows asked for, rounded up to the shards
    assert engine_rows(s, free_bytes=1 << 40, shards=4, slots=512, wanted=10).rows == 12
    # never below the shards while one row per device fits the whole memory
    tight = engine_fit(s, rows=2, slots=512, shards=2, free_bytes=None).total_bytes
    assert engine_rows(s, free_bytes=tight + 1, shards=2, slots=512, wanted=64).rows == 2


def test_explicit_rows_are_kept_or_refused_with_what_fits():
    s = spec()
    free = 512 * MIB
    slots = 4096
    big = engine_fit(s, rows=4096, slots=slots, shards=1, free_bytes=free)
    assert big.total_bytes > free  # the premise
    with pytest.raises(JaxevalError) as err:
        engine_rows(s, free_bytes=free, shards=1, slots=slots, wanted=4096, explicit=True)
    text = str(err.value)
    assert "gen_batch_size=4096" in text and "KV cache" in text
    most = int(text.split("at most ")[1].split(" ")[0])
    assert engine_fit(s, rows=most, slots=slots, shards=1, free_bytes=free).total_bytes <= free
    assert engine_fit(s, rows=most + 1, slots=slots, shards=1, free_bytes=free).total_bytes > free
    # an explicit count that fits is kept even above half the memory
    kept = engine_rows(s, free_bytes=free, shards=1, slots=slots, wanted=most, explicit=True)
    assert kept.rows == most


def test_no_engine_fits_says_what_to_change():
    s = spec()
    with pytest.raises(JaxevalError) as err:
        engine_rows(s, free_bytes=1024, shards=1, slots=4096, wanted=16)
    assert "no engine of 4,096 slots fits" in str(err.value)
    assert "more devices" in str(err.value)


@pytest.mark.slow
def test_rows_cut_to_memory_generate_the_same_tokens(monkeypatch):
    from transformers import AutoTokenizer

    from jaxeval.lm.generate import engine
    from jaxeval.lm.generate.generator import Generator
    from jaxeval.models import load_model

    path = tiny_models.tiny_checkpoint("llama")
    model, tok = load_model(path), AutoTokenizer.from_pretrained(path)
    words = "the quick brown fox jumps over a lazy dog".split()
    requests = [
        (" ".join(words[: 3 + i % 6]), {"max_gen_toks": 4 + (i * 5) % 11, "until": ["zzz"]})
        for i in range(12)
    ]

    def run(free, **kwargs):
        monkeypatch.setattr(engine, "free_bytes_per_device", lambda mesh: free)
        gen = Generator(model=model, tokenizer=tok, max_length=128, min_prefix=0, **kwargs)
        return gen.generate_tokens(requests), gen.stats

    wide, stats = run(1 << 40, batch_size=16)
    assert stats["engine_rows"] == 16
    slots = stats["engine_slots"]

    def total(rows):
        return engine_fit(model.spec, rows=rows, slots=slots, shards=1, free_bytes=None).total_bytes

    free = total(2) + total(4)  # half of it holds 2 rows, not 4
    cut, stats = run(free, batch_size=16)
    assert stats["engine_rows"] == 2 and cut == wide
    with pytest.raises(JaxevalError, match="gen_batch_size=16"):
        run(total(8), batch_size=16, fit_rows=False)
    kept, stats = run(total(4), batch_size=4, fit_rows=False)  # all of the memory, not half
    assert stats["engine_rows"] == 4 and kept == wide


def test_model_arguments_say_which_rows_are_explicit():
    from jaxeval.lm.model_config import JaxLMConfig

    assert (
        JaxLMConfig.from_kwargs({"pretrained": "/m", "gen_batch_size": 8}).gen_config.fit_rows
        is False
    )
    assert JaxLMConfig(pretrained="/m", batch_size=32).gen_config.fit_rows is True
    assert JaxLMConfig(pretrained="/m", batch_size="auto").gen_config.fit_rows is True

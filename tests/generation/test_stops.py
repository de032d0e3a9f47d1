"""Stop strings: the token byte table, the on-device matcher, and the host cut (lm-eval's)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxeval.kernels.stop_match import append_token_bytes, empty_buffer, stop_found
from jaxeval.lm.generate.stops import (
    BUFFER_BYTES,
    cut_at_stops,
    special_token_ids,
    stop_rows,
    token_bytes,
)


@functools.cache
def tokenizer(style: str):
    from transformers import AutoTokenizer

    from tests.helpers.tiny_models import tiny_checkpoint

    return AutoTokenizer.from_pretrained(tiny_checkpoint("gpt2" if style == "gpt2" else "llama"))


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_token_bytes_concatenate_to_the_decoded_text(style):
    tok = tokenizer(style)
    table, lengths = token_bytes(tok, len(tok), BUFFER_BYTES)
    assert lengths[tok.eos_token_id] == 0  # special tokens are skipped by decoding
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, len(tok), 12).tolist()
        data = b"".join(bytes(table[t, BUFFER_BYTES - lengths[t] :].astype(np.uint8)) for t in ids)
        assert data.decode("utf-8", "replace") == tok.decode(ids, skip_special_tokens=True)


def run_matcher(tok, ids, stops):
    table, lengths = token_bytes(tok, len(tok), BUFFER_BYTES)
    rows = stop_rows(stops, eos_ids=[], specials=special_token_ids(tok))

    @jax.jit
    def go(ids):
        buf = empty_buffer(1, BUFFER_BYTES)
        found = []
        for t in range(ids.shape[0]):
            buf = append_token_bytes(buf, ids[t : t + 1], jnp.asarray(table), jnp.asarray(lengths))
            found.append(stop_found(buf, jnp.asarray(rows.stops)[None])[0])
        return jnp.stack(found)

    return np.asarray(go(jnp.asarray(ids, jnp.int32)))


def test_stop_spanning_tokens_is_found_at_the_token_that_completes_it():
    tok = tokenizer("gpt2")
    text = "Question: What is the capital of France?\nAnswer: Paris."
    ids = tok.encode(text, add_special_tokens=False)
    # a stop made of the end of one token and the start of the next
    k = 3
    left = tok.decode(ids[:k])
    stop = left[-2:] + tok.decode(ids[: k + 1])[len(left) : len(left) + 1]
    found = run_matcher(tok, ids, [stop])
    first = next(i for i in range(len(ids)) if stop in tok.decode(ids[: i + 1]))
    assert first == k and not found[:first].any() and found[first:].all()


def test_matcher_never_fires_without_the_text():
    tok = tokenizer("llama")
    ids = tok.encode("abc abc abc", add_special_tokens=False)
    assert not run_matcher(tok, ids, ["abd", "cc", "\n\n"]).any()
    assert run_matcher(tok, ids, ["c a"]).any()


def test_special_token_stops_become_stop_ids():
    tok = tokenizer("llama")
    rows = stop_rows(["</s>", "\n\n", ""], eos_ids=[7], specials=special_token_ids(tok))
    assert set(rows.stop_ids[rows.stop_ids >= 0]) == {7, tok.eos_token_id}
    assert (rows.stops >= 0).sum() == 2  # only "\n\n" is matched as bytes
    assert rows.max_new_cap == 1  # lm-eval stops at once on an empty stop string


def test_cut_at_earliest_stop_keeps_everything_else():
    assert cut_at_stops(" Paris.\n\nQ: x", ["\n\n", "Q:"]) == " Paris."
    assert cut_at_stops("a Q: b\n\n", ["\n\n", "Q:"]) == "a "
    assert cut_at_stops("  spaced  ", ["", "zz"]) == "  spaced  "


@pytest.mark.parametrize("style", ["gpt2", "llama"])
def test_token_bytes_fast_decode_equals_batch_decode(style):
    """The Rust backend's decode_batch path gives the table `batch_decode` gives, byte for byte,
    and the byte-level check reads the same decoder as the whole tokenizer's JSON."""
    import json

    from jaxeval.lm.generate import stops as gen_stops

    tok = tokenizer(style)
    seqs = [[3, t] for t in range(len(tok))]
    slow = tok.batch_decode(seqs, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert gen_stops._decode_all(seqs, tok) == slow
    full = json.loads(tok.backend_tokenizer.to_str()).get("decoder") or {}
    assert gen_stops._is_byte_level(tok) == ("ByteLevel" in json.dumps(full))
    fast_table = gen_stops.token_bytes(tok, len(tok), BUFFER_BYTES)

    class Plain:  # no Rust backend: the batch_decode path
        def __getattr__(self, name):
            return getattr(tok, name)

        def __len__(self):
            return len(tok)

    plain = Plain()
    assert gen_stops._decode_all(seqs, plain) == slow
    slow_table = gen_stops.token_bytes(plain, len(tok), BUFFER_BYTES)
    np.testing.assert_array_equal(fast_table[0], slow_table[0])
    np.testing.assert_array_equal(fast_table[1], slow_table[1])

"""The direct Rust batch path gives `tokenizer(strings)["input_ids"]` exactly, and steps aside
wherever it could differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from jaxeval.demo.tiny import train_tokenizer
from jaxeval.lm import batch_tokenize
from jaxeval.lm.batch_tokenize import BatchTokenizer
from jaxeval.lm.encoding import Encoder

DATA = Path(__file__).resolve().parents[1] / "data"

STRINGS = [
    "Question: what is 2 + 2?\nAnswer:",
    " 4",
    "",
    "  leading and trailing  ",
    "naïve café — 東京 😀",
    "<s> a literal BOS string",
    "</s><s>",
    "tabs\tand\nnewlines\r\n",
    "x" * 3000,
]


def _texts() -> list[str]:
    rows = [json.loads(line) for line in (DATA / "ai2_arc/ARC-Easy/test.jsonl").open()][:30]
    return [r["question"] + " " + " ".join(r["choices"]["text"]) for r in rows] + STRINGS


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tokenizer(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"tok-{request.param}")
    train_tokenizer(_texts(), str(out), style=request.param, vocab_size=400)
    return AutoTokenizer.from_pretrained(str(out))


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_the_rust_path_equals_the_tokenizer_call(tokenizer, add_special_tokens):
    strings = _texts() * 2
    encode = BatchTokenizer(tokenizer)
    assert encode.direct
    want = tokenizer(strings, add_special_tokens=add_special_tokens)["input_ids"]
    assert encode(strings, add_special_tokens=add_special_tokens) == want
    assert encode.direct  # the first-use check agreed


def test_split_special_tokens_is_honoured(tokenizer):
    tokenizer.split_special_tokens = True
    try:
        want = tokenizer(STRINGS)["input_ids"]
        assert BatchTokenizer(tokenizer)(STRINGS) == want
    finally:
        tokenizer.split_special_tokens = False
    assert BatchTokenizer(tokenizer)(STRINGS) == tokenizer(STRINGS)["input_ids"]


def test_a_subclass_that_rewrites_text_keeps_its_own_call(tokenizer):
    class Shouting(type(tokenizer)):
        def __call__(self, text, **kwargs):
            return super().__call__([t.upper() for t in text], **kwargs)

    shouting = Shouting.__new__(Shouting)
    shouting.__dict__.update(tokenizer.__dict__)
    encode = BatchTokenizer(shouting)
    assert not encode.direct
    assert encode(STRINGS) == shouting(STRINGS)["input_ids"]


def test_a_disagreement_on_first_use_falls_back(tokenizer, monkeypatch):
    encode = BatchTokenizer(tokenizer)
    monkeypatch.setattr(encode, "_rust", lambda strings, flag: [[0] for _ in strings])
    assert encode(STRINGS) == tokenizer(STRINGS)["input_ids"]
    assert not encode.direct


def test_only_the_first_strings_are_checked(tokenizer, monkeypatch):
    calls = []
    encode = BatchTokenizer(tokenizer)
    real = encode._call

    def counting(strings, flag):
        calls.append(len(strings))
        return real(strings, flag)

    monkeypatch.setattr(encode, "_call", counting)
    strings = _texts() * 3
    assert encode(strings) == tokenizer(strings)["input_ids"]
    encode(strings)
    assert calls == [batch_tokenize.CHECKED_STRINGS]


def test_encoder_requests_are_unchanged(tokenizer, monkeypatch):
    pairs = [(s, " " + t) for s, t in zip(_texts(), reversed(_texts())) if s]
    pairs += [("", " alone"), ("Answer: ", "4")]
    fast = Encoder(tokenizer).encode_requests(pairs)
    monkeypatch.setattr(batch_tokenize, "_backend_is_plain", lambda tok: False)
    assert Encoder(tokenizer).encode_requests(pairs) == fast

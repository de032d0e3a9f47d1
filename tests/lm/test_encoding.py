"""Encoding rules, checked against lm-eval's own HFLM / TemplateLM code on the same tokenizers."""

from __future__ import annotations

import logging

import pytest

from tests.needs_torch import REASON

pytest.importorskip("torch", reason=REASON)  # lm-eval's HF backend imports it

from lm_eval.api.instance import Instance as LmEvalInstance
from lm_eval.api.model import TemplateLM
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import resolve_max_length as lm_eval_resolve_max_length
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from jaxeval.demo.tiny import train_tokenizer
from jaxeval.lm.encoding import (
    TOKENIZER_INFINITY,
    Encoder,
    move_trailing_whitespace,
    resolve_max_length,
    rolling_windows,
    truncate_request,
)
from tests.helpers.tiny_models import TEXT


class LmEvalEncoding:
    """lm-eval's encoding methods bound to a minimal object (no model needed)."""

    backend = "causal"
    tok_encode = HFLM.tok_encode
    _encode_pair = TemplateLM._encode_pair
    loglikelihood = TemplateLM.loglikelihood
    prefix_token_id = HFLM.prefix_token_id

    def __init__(self, tokenizer, add_bos_token=None, prefix_token_id=None):
        self.tokenizer = tokenizer
        self.add_bos_token = add_bos_token
        self.custom_prefix_token_id = prefix_token_id

    def _loglikelihood_tokens(self, requests, **kwargs):
        return [(ctx, cont) for _, ctx, cont in requests]


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tokenizer(request, tmp_path_factory):
    from transformers import AutoTokenizer

    path = train_tokenizer(
        TEXT, str(tmp_path_factory.mktemp(request.param)), style=request.param, vocab_size=512
    )
    return AutoTokenizer.from_pretrained(path)


STRINGS = [
    "Question: What is the capital of France?\nAnswer:",
    "Question: 2+2?\nAnswer: ",
    "The quick brown fox\n\n",
    "tabs\t \t",
    "naïve café — ünïcödé ✓",
    " leading space",
    "x",
]
PAIRS = [
    ("Question: What is the capital of France?\nAnswer:", " Paris"),
    ("Question: What is the capital of France?\nAnswer: ", "Paris"),
    ("Trailing spaces   ", "  and more"),
    ("Newline end\n", "next line"),
    ("The quick brown", " fox jumps over the lazy dog."),
    ("merge", "d tokens across the boundary"),
    ("", " unconditional"),
    ("", "no leading space"),
]


@pytest.mark.parametrize("add_bos_token", [None, True, False])
@pytest.mark.parametrize("prefix_token_id", [None, 7])
def test_tok_encode_and_pairs_match_lm_eval(tokenizer, add_bos_token, prefix_token_id):
    ours = Encoder(tokenizer, add_bos_token=add_bos_token, prefix_token_id=prefix_token_id)
    ref = LmEvalEncoding(tokenizer, add_bos_token, prefix_token_id)
    assert ours.prefix_token_id == ref.prefix_token_id
    bos_str = tokenizer.decode(ref.prefix_token_id)
    strings = STRINGS + [bos_str + s for s in STRINGS[:3]]
    for s in strings:
        for special in (None, True, False):
            assert ours.tok_encode(s, special) == ref.tok_encode(s, special), (s, special)
        assert ours.tok_encode(s, left_truncate_len=3) == ref.tok_encode(s, left_truncate_len=3)
    assert ours.tok_encode_many(strings) == [ref.tok_encode(s) for s in strings]
    pairs = PAIRS + [("", bos_str + " starts with the prefix token")]
    want = ref.loglikelihood(
        [LmEvalInstance("loglikelihood", {}, p, 0) for p in pairs], disable_tqdm=True
    )
    assert [ours.encode_request(*p) for p in pairs] == want
    assert ours.encode_requests(pairs) == want


def test_encode_pair_moves_trailing_whitespace():
    assert move_trailing_whitespace("Answer: ", "Paris") == ("Answer:", " Paris")
    assert move_trailing_whitespace("Q:\n\n", "x") == ("Q:", "\n\nx")
    assert move_trailing_whitespace("Q:", " x") == ("Q:", " x")


def test_bos_rules_on_a_llama_style_tokenizer(tokenizer):
    enc = Encoder(tokenizer)
    ids = enc.tok_encode("hello")
    if (
        tokenizer.bos_token_id is not None
        and tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id
    ):
        assert ids[0] == tokenizer.bos_token_id  # the tokenizer's default adds BOS
        assert enc.tok_encode("<s>hello") == tokenizer.encode("<s>hello", add_special_tokens=False)
        assert Encoder(tokenizer, add_bos_token=False).tok_encode("hello") == ids[1:]
    else:
        assert tokenizer.bos_token_id not in ids


@pytest.mark.parametrize("n", list(range(0, 23)))
@pytest.mark.parametrize("max_length", [1, 2, 3, 5, 8])
def test_rolling_windows_match_lm_eval(n, max_length):
    tokens = list(range(100, 100 + n))
    want = [
        make_disjoint_window(w)
        for w in get_rolling_token_windows(
            tokens, prefix_token=1, max_seq_len=max_length, context_len=1
        )
    ]
    assert rolling_windows(tokens, prefix_token=1, max_length=max_length) == want
    scored = [t for _, cont in want for t in cont]
    assert scored == tokens  # every token predicted exactly once


def test_rolling_windows_golden():
    assert rolling_windows(list(range(1, 11)), prefix_token=0, max_length=4) == [
        ([0], [1, 2, 3, 4]),
        ([4], [5, 6, 7, 8]),
        ([6, 7, 8], [9, 10]),
    ]


def test_rolling_bos_after_prefix_bos_quirk(tokenizer):
    """With a BOS-adding tokenizer the first window scores the document's own BOS after the prefix BOS."""
    enc = Encoder(tokenizer)
    ids = enc.tok_encode("The quick brown fox jumps over the lazy dog.")
    (ctx, cont), *_ = enc.rolling_requests("The quick brown fox jumps over the lazy dog.", 4)
    assert ctx == [enc.prefix_token_id] and cont == ids[:4]
    if ids[0] == tokenizer.bos_token_id:
        assert cont[0] == ctx[0] == tokenizer.bos_token_id


@pytest.mark.parametrize(
    "n_ctx,n_cont,max_length", [(5, 2, 4), (3, 2, 4), (1, 4, 4), (9, 1, 4), (2, 2, 3), (6, 3, 8)]
)
def test_truncation_matches_lm_eval(n_ctx, n_cont, max_length, caplog):
    ctx, cont = list(range(1, n_ctx + 1)), list(range(100, 100 + n_cont))
    with caplog.at_level(logging.WARNING):
        r = truncate_request(ctx, cont, max_length)
    inp = (ctx + cont)[-(max_length + 1) :][:-1]
    assert list(r.context) + list(r.continuation)[:-1] == inp
    assert r.continuation == tuple(cont) and len(r.context) >= 1 and r.input_len <= max_length
    assert (r.truncated > 0) == (n_ctx + n_cont > max_length + 1)
    assert ("Truncating" in caplog.text) == (r.truncated > 0)


def test_truncation_golden_and_errors():
    r = truncate_request([1, 2, 3, 4, 5], [6, 7], 4)
    assert (r.context, r.continuation, r.truncated) == ((3, 4, 5), (6, 7), 2)
    with pytest.raises(ValueError):
        truncate_request([1], [2, 3, 4, 5, 6], 4)  # lm-eval asserts len(cont) <= max_length
    with pytest.raises(ValueError):
        truncate_request([1], [], 4)


def test_resolve_max_length_matches_lm_eval():
    from transformers import GPT2Config, LlamaConfig, PretrainedConfig

    class Tok:
        def __init__(self, n):
            self.model_max_length = n

    class WithText(PretrainedConfig):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.text_config = LlamaConfig(max_position_embeddings=32768)
            self.max_position_embeddings = 1200

    cases = [
        (LlamaConfig(max_position_embeddings=4096), None),
        (GPT2Config(n_positions=1024), None),
        (WithText(), None),
        (PretrainedConfig(), Tok(777)),
        (PretrainedConfig(), Tok(TOKENIZER_INFINITY)),
        (PretrainedConfig(), None),
    ]
    for config, tok in cases:
        assert resolve_max_length(config, tok) == lm_eval_resolve_max_length(config, tok)
    assert [resolve_max_length(c, t) for c, t in cases] == [4096, 1024, 32768, 777, 2048, 2048]

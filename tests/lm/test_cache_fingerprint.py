"""The response cache serves only what this run would compute.

* Every model argument is classified: changing one outside `PERFORMANCE_ARGS` changes the
  fingerprint, changing a performance knob does not (the arguments come from `JaxLMConfig.names()`,
  so a new argument fails here until it is given a changed value below).
* On a real JaxLM: `add_bos_token=False` and `max_gen_toks` are misses, config.json's bytes count
  (same size and mtime), and `cache_hash_weights=True` sees a same-size weight swap whose mtime was
  restored (`cp -p`, `rsync -a`).
* Stored values are checked on read: malformed, non-finite or wrongly typed ones are misses,
  computed again and replaced, with one warning; a row under another fingerprint is never served.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3

import pytest

from jaxeval.api.instance import Instance
from jaxeval.cache import CachingLM, ResponseStore, checked_answer, hash_args
from jaxeval.lm.fingerprint import PERFORMANCE_ARGS, answer_args, file_identity
from jaxeval.lm.generate.config import GenConfig
from jaxeval.lm.model_config import JaxLMConfig

BASE = {"pretrained": "/m", "dtype": "float32"}
# A value other than BASE's (or the default) for every model argument.
CHANGED = {
    "pretrained": "/other",
    "dtype": "bfloat16",
    "batch_size": 8,
    "max_batch_size": 7,
    "max_length": 99,
    "add_bos_token": False,
    "prefix_token_id": 5,
    "trust_remote_code": True,
    "revision": "v2",
    "tokenizer": "/tok",
    "use_fast_tokenizer": False,
    "backend": "causal",
    "softmax_dtype": "float32",
    "mesh": "data",
    "token_budget": 512,
    "buckets": "64x8",
    "packing": False,
    "shared_context": False,
    "vocab_chunk": 128,
    "gguf_file": "m.gguf",
    "compilation_cache": "off",
    "attention": "xla",
    "experts": "ragged",
    "generation": GenConfig(max_gen_toks=7),
    "cache_hash_weights": True,
    "gen_batch_size": 32,
    "seed": 7,
    "max_gen_toks": 9,
    "gen_continuous": False,
    "gen_min_prefix": 8,
    "gen_refill_rows": 4,
    "gen_admission": "request",
    "gen_tail": False,
    "gen_shrink_last_batch": False,
}


def test_every_model_argument_is_classified():
    names = JaxLMConfig.names()
    assert not set(PERFORMANCE_ARGS) - set(names), "PERFORMANCE_ARGS names no such argument"
    missing = sorted(set(names) - set(CHANGED))
    assert not missing, f"give these new model arguments a changed value here: {missing}"
    base = answer_args(JaxLMConfig.from_kwargs(BASE))
    for name in names:
        changed = answer_args(JaxLMConfig.from_kwargs({**BASE, name: CHANGED[name]}))
        if name in PERFORMANCE_ARGS:
            assert changed == base, f"{name} is a performance knob, yet changes the fingerprint"
        else:
            assert changed != base, f"{name} can change answers, yet leaves the fingerprint alone"


def test_answer_args_hold_no_object_addresses():
    class Tok:
        pass

    args = answer_args(JaxLMConfig.from_kwargs({**BASE, "tokenizer": Tok()}))
    assert args["tokenizer"] == "test_answer_args_hold_no_object_addresses.<locals>.Tok"


# -- a real model ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from tests.helpers.tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint("llama", str(tmp_path_factory.mktemp("fp_llama")), seed=3)


def _jax_lm(path, **kwargs):
    from jaxeval.lm.jax_lm import JaxLM

    return JaxLM(pretrained=str(path), dtype="float32", mesh="single", max_length=64, **kwargs)


def _ll(*pairs):
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]


REQUESTS = _ll(("The sky is", " blue"), ("Two plus two is", " four"), ("", " hello world"))


def test_model_args_that_change_answers_are_misses(tmp_path, ckpt):
    path = str(tmp_path / "c.db")
    plain = _jax_lm(ckpt)
    first = CachingLM(plain, path).loglikelihood(REQUESTS)
    assert _jax_lm(ckpt, token_budget=128).fingerprint() == plain.fingerprint()  # performance

    no_bos = _jax_lm(ckpt, add_bos_token=False)
    cached = CachingLM(no_bos, path)
    got = cached.loglikelihood(REQUESTS)
    assert cached.cache_stats() == {"served": 0, "computed": len(REQUESTS)}
    assert got == no_bos.loglikelihood(REQUESTS) and got != first  # its own answers, not the old

    assert _jax_lm(ckpt, max_gen_toks=3).fingerprint() != plain.fingerprint()


def test_config_json_bytes_count_at_the_same_size_and_mtime(tmp_path, ckpt):
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    config = copy / "config.json"
    before = file_identity(str(copy))
    text = config.read_text()
    assert '"rms_norm_eps": 1e-06' in text
    stat = config.stat()
    config.write_text(text.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05'))
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert config.stat().st_size == stat.st_size and config.stat().st_mtime_ns == stat.st_mtime_ns
    assert file_identity(str(copy)) != before


def _swap_weights_keeping_size_and_mtime(weights):
    """Flips one byte of the tensor data (after the safetensors header), then restores the mtime,
    as `cp -p` or `rsync -a` of other same-size weights would leave it."""
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0x40
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size
    assert weights.stat().st_mtime_ns == stat.st_mtime_ns


def test_cache_hash_weights_sees_a_same_size_same_mtime_swap(tmp_path, ckpt):
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy, copy_function=shutil.copy2)
    lm = _jax_lm(copy, cache_hash_weights=True)
    hashed, by_mtime = lm.fingerprint(), file_identity(str(copy))
    _swap_weights_keeping_size_and_mtime(copy / "model.safetensors")
    assert lm.fingerprint() != hashed
    assert file_identity(str(copy)) == by_mtime  # the default (size, mtime) cannot see it


# -- stored values --------------------------------------------------------------------------------


class _Model:
    def __init__(self, tag="m", value=-1.5):
        self.tag, self.value, self.sent = tag, value, 0

    def fingerprint(self):
        return self.tag

    def loglikelihood(self, requests):
        self.sent += len(requests)
        return [(self.value, True)] * len(requests)

    def loglikelihood_rolling(self, requests):
        self.sent += len(requests)
        return [self.value * 10] * len(requests)

    def generate_until(self, requests):
        self.sent += len(requests)
        return ["text"] * len(requests)


def _set_values(path, value):
    con = sqlite3.connect(path)
    with con:
        con.execute("UPDATE answers SET value = ?", (value,))
    con.close()


@pytest.mark.parametrize(
    "method, bad",
    [
        ("loglikelihood", "[NaN, true]"),
        ("loglikelihood", "[-Infinity, false]"),
        ("loglikelihood", "[-1.0, 0]"),
        ("loglikelihood", "[-1.0, true, 3]"),
        ("loglikelihood", '"-1.0"'),
        ("loglikelihood", "not json"),
        ("loglikelihood", "[1e999, true]"),
        ("loglikelihood_rolling", "NaN"),
        ("loglikelihood_rolling", "Infinity"),
        ("loglikelihood_rolling", "true"),
        ("loglikelihood_rolling", "[1]"),
        ("generate_until", "3"),
        ("generate_until", "null"),
        ("generate_until", "{"),
    ],
)
def test_an_unusable_stored_value_is_a_miss_with_one_warning(tmp_path, caplog, method, bad):
    path = str(tmp_path / "c.db")
    args = {
        "loglikelihood": ("ctx", " cont"),
        "loglikelihood_rolling": ("a document",),
        "generate_until": ("ctx", {"until": ["\n"]}),
    }[method]
    reqs = [Instance(method, {}, args, 0), Instance(method, {}, args, 1)]
    want = getattr(CachingLM(_Model(), path), method)(reqs)
    _set_values(path, bad)
    model = _Model()
    with caplog.at_level(logging.WARNING, logger="jaxeval.cache"):
        got = getattr(CachingLM(model, path), method)(reqs)
    assert got == want and model.sent == 2  # computed again, both
    warnings = [r for r in caplog.records if "unusable" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    again = _Model()
    assert getattr(CachingLM(again, path), method)(reqs) == want and again.sent == 0  # replaced


def test_checked_answer_keeps_good_values():
    assert checked_answer("loglikelihood", "[-3.25, false]") == (-3.25, False)
    assert checked_answer("loglikelihood", "[-3, true]") == (-3.0, True)
    assert checked_answer("loglikelihood_rolling", "-153.5") == -153.5
    assert checked_answer("generate_until", '" Paris"') == " Paris"


def test_a_row_under_another_fingerprint_is_never_served(tmp_path, caplog):
    """Serving needs the key and the fingerprint column to agree, so the warning's count is
    exactly the rows this run never reads."""
    path = str(tmp_path / "c.db")
    reqs = _ll(("a", " b"))
    key = hash_args("new", "loglikelihood", reqs[0].args)
    ResponseStore(path).put([(key, "old", [-9.0, True])])  # this run's key, another model's row
    model = _Model("new", -2.0)
    with caplog.at_level(logging.WARNING, logger="jaxeval.cache"):
        assert CachingLM(model, path).loglikelihood(reqs) == [(-2.0, True)]
    assert model.sent == 1
    assert "holds 1 answers from other weights" in caplog.text
    assert "none of them is served" in caplog.text

"""JaxLM's interface: registry names, arguments, properties (the numbers are in test_parity)."""

from __future__ import annotations

import pytest

import jaxeval.lm as lm_pkg
from jaxeval.errors import JaxevalError
from jaxeval.lm.jax_lm import JaxLM
from jaxeval.lm.model_config import IGNORED_HF_ARGS, JaxLMConfig
from jaxeval.lm.model_config import parse_batch_size as _parse_batch_size
from jaxeval.lm.score.budget import auto_token_budget
from jaxeval.models import load_model
from jaxeval.platform.mesh import make_mesh
from tests.helpers.tiny_models import tiny_checkpoint
from tests.lm.conftest import hf_oracle, our_instances


@pytest.fixture(scope="module")
def llama():
    path = tiny_checkpoint("llama")
    return path, load_model(path, mesh=make_mesh("single"), dtype="float32")


def test_registered_as_jax_and_hf():
    assert lm_pkg.MODELS.get("jax") is JaxLM and lm_pkg.MODELS.get("hf") is JaxLM
    for name in ("JaxLM", "Encoder", "plan_score_batches", "make_buckets", "truncate_request"):
        assert name in lm_pkg.__all__ and hasattr(lm_pkg, name)


def test_unknown_argument_is_a_clear_error(llama):
    path, _ = llama
    with pytest.raises(JaxevalError, match="unknown model argument.*bogus"):
        JaxLM(pretrained=path, bogus=1)
    with pytest.raises(JaxevalError, match="pretrained"):
        JaxLM()
    with pytest.raises(JaxevalError, match="batch_size"):
        _parse_batch_size("lots")


def test_known_arguments_come_from_the_config_fields():
    """The message lists every field of JaxLMConfig (and nothing else); HF-only arguments pass."""
    with pytest.raises(JaxevalError) as info:
        JaxLMConfig.from_kwargs({"pretrained": "/m", "bogus": 1, "also_bogus": 2})
    assert "bogus, also_bogus" not in str(info.value)  # sorted
    hint = info.value.hint
    assert hint == "known: " + ", ".join(JaxLMConfig.names())
    for name in ("vocab_chunk", "gen_batch_size", "use_fast_tokenizer", "backend", "gguf_file"):
        assert name in JaxLMConfig.names()
    config = JaxLMConfig.from_kwargs({"pretrained": "/m", **dict.fromkeys(IGNORED_HF_ARGS, "x")})
    assert config.pretrained == "/m" and config.batch_size == 1
    assert JaxLMConfig(pretrained="/m", batch_size="auto:4").batch_size == "auto"
    assert JaxLMConfig(pretrained="/m", batch_size=2).generation_batch_size == 64
    assert JaxLMConfig(pretrained="/m", batch_size="auto").generation_batch_size == 64
    assert JaxLMConfig(pretrained="/m", batch_size=128).generation_batch_size == 128
    with pytest.raises(JaxevalError, match="backend"):
        JaxLMConfig(pretrained="/m", backend="seq2seq")


def test_batch_size_forms_and_cpu_auto_budget(llama):
    assert (
        _parse_batch_size("auto:4") == "auto"
        and _parse_batch_size("8") == 8
        and _parse_batch_size(2) == 2
    )
    _, loaded = llama
    budget = auto_token_budget(loaded.spec, loaded.mesh, 512, 64)
    assert budget == 8192  # CPU: no memory_stats, fixed default
    lm = JaxLM(pretrained=loaded, batch_size="auto", max_length=128)
    assert lm.token_budget == 8192 and lm.buckets.max_length >= 128


def test_properties_match_hflm(llama):
    path, loaded = llama
    ours = JaxLM.create_from_arg_string(
        "pretrained=" + path + ",dtype=float32,batch_size=4", {"device": "cpu"}
    )
    ref = hf_oracle(path)
    assert ours.eot_token_id == ref.eot_token_id
    assert ours.prefix_token_id == ref.prefix_token_id
    assert (
        ours.max_length
        == 512
        == ref.__class__(pretrained=path, dtype="float32", device="cpu").max_length
    )
    assert ours.max_gen_toks == 256 and ours.tokenizer_name == ref.tokenizer_name
    assert ours.tok_encode("hello world") == ref.tok_encode("hello world")
    custom = JaxLM(pretrained=loaded, prefix_token_id=5, add_bos_token=False, max_length=64)
    assert custom.prefix_token_id == 5 and custom.max_length == 64
    assert custom.tok_encode("hi") == ref.tokenizer.encode("hi", add_special_tokens=False)
    info = ours.model_info()
    assert info["model_type"] == "llama" and info["model_num_parameters"] > 0


@pytest.mark.slow
def test_generate_until_answers_every_request_and_batch_size_does_not_matter(llama):
    _, loaded = llama
    reqs = [
        ("hi there", {"until": ["\n"], "max_gen_toks": 5}),
        ("The quick", {"until": ["."], "max_gen_toks": 7}),
        ("hi there", {"until": ["\n"], "max_gen_toks": 5}),
    ]
    one = JaxLM(pretrained=loaded, max_length=64, gen_batch_size=1).generate_until(
        our_instances("generate_until", reqs)
    )
    many = JaxLM(pretrained=loaded, max_length=64).generate_until(
        our_instances("generate_until", reqs)
    )
    assert one == many and len(one) == 3 and one[0] == one[2]
    assert all(isinstance(t, str) for t in one)
    lm = JaxLM(pretrained=loaded, max_length=64)
    assert (
        lm.loglikelihood([]) == []
        and lm.loglikelihood_rolling([]) == []
        and lm.generate_until([]) == []
    )

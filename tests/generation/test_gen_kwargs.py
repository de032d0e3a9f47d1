"""gen_kwargs normalization: lm-eval's rules (checked against lm-eval's own functions) and clear errors."""

from __future__ import annotations

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.lm.generate.kwargs import SamplingDefaults, normalize

CASES = [
    {},
    {"until": "\n\n"},
    {"until": ["Q:", "\n"], "max_gen_toks": 32},
    {"max_new_tokens": 20, "max_tokens": 30},
    {"max_tokens": 30, "max_completion_tokens": 40},
    {"max_completion_tokens": 40},
    {"max_gen_toks": "12"},
    {"temperature": 0.0},
    {"temperature": 0.7},
    {"do_sample": False, "temperature": 0.7},
    {"do_sample": True, "temperature": 0.5, "top_p": 0.9},
    {"until": ["</s>", "x"]},
]


@pytest.mark.parametrize("gen_kwargs", CASES)
def test_matches_lm_eval_normalization(gen_kwargs):
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    theirs = normalize_gen_kwargs(dict(gen_kwargs), 256)
    until = handle_stop_sequences(theirs.pop("until", None), eos="</s>")
    ours = normalize(gen_kwargs, eos="</s>")
    assert list(ours.until) == until
    assert ours.max_gen_toks == theirs["max_gen_toks"]
    assert ours.do_sample == theirs["do_sample"]
    assert ours.temperature == float(theirs.get("temperature", 0.0))


def test_sampling_defaults_come_from_generation_config_then_transformers():
    s = normalize({"temperature": 0.8}, eos=None)
    assert (s.top_k, s.top_p) == (50, 1.0)  # transformers' defaults when sampling
    s = normalize(
        {"temperature": 0.8}, eos=None, sampling_defaults=SamplingDefaults(top_k=0, top_p=0.9)
    )
    assert (s.top_k, s.top_p) == (0, 0.9)
    s = normalize({"temperature": 0.8, "top_k": 5}, eos=None)
    assert s.top_k == 5
    assert normalize({"top_k": 5}, eos=None).greedy  # greedy ignores the warpers


@pytest.mark.parametrize(
    "gen_kwargs, field",
    [
        ({"max_length": 100}, "max_length"),
        ({"num_beams": 4}, "num_beams"),
        ({"typical_p": 0.5}, "typical_p"),
        ({"do_sample": True}, "temperature"),  # transformers raises on temperature 0 sampling
        ({"do_sample": "yes", "temperature": 1.0}, "do_sample"),
        ({"until": [None]}, "until"),
        ({"until": None}, "until"),
        ({"max_gen_toks": 0}, "max_gen_toks"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
    ],
)
def test_invalid_kwargs_raise_clear_errors(gen_kwargs, field):
    with pytest.raises(JaxevalError) as err:
        normalize(gen_kwargs, eos="</s>")
    assert err.value.field == field


def test_neutral_values_are_accepted():
    s = normalize({"num_beams": 1, "repetition_penalty": 1.0, "use_cache": True}, eos=None)
    assert s.greedy and s.until == ()

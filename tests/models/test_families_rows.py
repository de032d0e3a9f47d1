"""The families table: one row per model_type, rule names checked when a row is written."""

from __future__ import annotations

import re

import pytest

import jaxeval.models.families as families
from jaxeval.models.families import FAMILIES, SUPPORTED_MODEL_TYPES, Family
from jaxeval.models.families.config import Field, When, option_value
from jaxeval.models.families.dense import Decoder
from jaxeval.models.families.routing import Experts
from jaxeval.models.families.table import ROWS


def test_one_row_per_model_type():
    assert [row.model_type for row in ROWS] == list(FAMILIES)
    assert len(ROWS) == len(SUPPORTED_MODEL_TYPES) == len(set(SUPPORTED_MODEL_TYPES))
    for row in ROWS:
        assert isinstance(row, Family) and row.checkpoints and row.differs, row.model_type
        moe = row.options is not None and row.options.experts is not None
        assert moe == (row.weights.__name__ == "moe"), row.model_type


def test_public_names():
    for name in families.__all__:
        assert getattr(families, name) is not None, name


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Decoder(sliding="evn"), "sliding 'evn' not in ('none', 'all', 'even'"),
        (lambda: Decoder(attn_scale="head_dim"), "attn_scale 'head_dim' not in"),
        (lambda: Decoder(rope_layers="nope"), "rope_layers 'nope' not in ('all', 'no_rope_layers'"),
        (
            lambda: Experts(count="num_experts", router_dtype="hidden", weight_dtype="hidden",
                            groups="n_groups"),
            "groups 'n_groups' not in ('n_group', 'group_limited_greedy')",
        ),
    ],
)  # fmt: skip
def test_unknown_rule_names_raise(make, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


def test_field_and_when_read_the_config():
    class Config:
        use_qk_norm = True
        attention_bias = None

    assert option_value(Field("attention_bias", True), Config) is None  # getattr: a None is kept
    assert option_value(Field("mlp_bias", False), Config) is False
    assert option_value(When(Field("use_qk_norm", False), "per_head"), Config) == "per_head"
    assert option_value(When(Field("missing", False), "a", "b"), Config) == "b"
    assert option_value("rms", Config) == "rms"
    with pytest.raises(AttributeError):
        option_value(Field("missing"), Config)  # no default: the field must exist

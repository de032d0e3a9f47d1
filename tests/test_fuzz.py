"""Property tests (hypothesis, derandomized): hostile input raises only `JaxevalError`.

* YAML text -> `load_yaml` -> `TaskConfig.from_dict`;
* jinja templates x documents -> `render` (sandboxed, StrictUndefined);
* any text -> request encoding (`Encoder.encode_requests`), left truncation and rolling windows,
  whose score points cover every token exactly once.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxeval.api.config import TaskConfig
from jaxeval.api.templates import render
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError
from jaxeval.lm.encoding import Encoder, rolling_windows
from jaxeval.lm.jax_lm import truncate_all

FUZZ = settings(
    derandomize=True,
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
KEYS = [
    "task",
    "dataset_path",
    "output_type",
    "doc_to_text",
    "doc_to_target",
    "doc_to_choice",
    "num_fewshot",
    "generation_kwargs",
    "metric_list",
    "repeats",
    "filter_list",
    "target_delimiter",
    "fewshot_config",
    "tag",
    "metadata",
    "include",
    "group",
    "task_alias",
    "unknown_key",
]
YAML_BITS = [
    "\n",
    ": ",
    "- ",
    "  ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    '"',
    "!function ",
    "&a",
    "*a",
    "#",
    "|",
    ">",
    "null",
    "true",
    "1",
    "-3",
    "1e9",
    "\t",
    "%",
    "@",
    "`",
    "{{x}}",
    "?",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=12),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def only_our_errors(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except JaxevalError:
        return None


@FUZZ
@given(
    st.lists(
        st.one_of(st.sampled_from(KEYS), st.sampled_from(YAML_BITS), st.text(max_size=6)),
        max_size=30,
    )
)
def test_yaml_text_raises_only_our_errors(tmp_path, parts):
    path = tmp_path / "fuzz.yaml"
    path.write_text("".join(parts), encoding="utf-8")
    cfg = only_our_errors(load_yaml, path, resolve_functions=False)
    if isinstance(cfg, dict) and "group" not in cfg:
        only_our_errors(TaskConfig.from_dict, cfg, source=str(path))


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS[:-5]), VALUES, max_size=6))
def test_task_config_fields_raise_only_our_errors(raw):
    only_our_errors(TaskConfig.from_dict, raw, source="fuzz.yaml")


TEMPLATE_BITS = [
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    " q ",
    " a ",
    "|upper",
    "|join(',')",
    "[0]",
    ".x",
    " if ",
    " else ",
    " for c in ",
    " endfor ",
    "(",
    ")",
    "'",
    "\n",
    "~",
    "+",
    "*",
    "/",
    " x ",
    "choices",
    "__class__",
    "|int",
    "1",
    "0",
    "-",
    "%",
]
EXPR_BITS = [
    "q",
    "a",
    "x",
    "choices",
    "1",
    "0",
    "/",
    "+",
    "*",
    "-",
    "%",
    "~",
    "|int",
    "|first",
    "|length",
    "|float",
    "(",
    ")",
    "range(10**9)",
    "|regex_replace('(','b')",
    "[0]",
    ".x",
    "'s'",
    "|join(',')",
    "10**9",
    "is",
    "not",
    "none",
    "and",
    "|upper",
    "[1:]",
]
EXPRESSIONS = st.lists(st.sampled_from(EXPR_BITS), min_size=1, max_size=6).map(" ".join)
TEMPLATES = st.one_of(
    st.lists(st.one_of(st.sampled_from(TEMPLATE_BITS), st.text(max_size=4)), max_size=16).map(
        "".join
    ),
    EXPRESSIONS.map(lambda e: "{{ " + e + " }}"),
    EXPRESSIONS.map(lambda e: "{% for i in " + e + " %}{{ i }}{% endfor %}"),
)


@FUZZ
@given(TEMPLATES, st.dictionaries(st.sampled_from(["q", "a", "x", "choices"]), VALUES, max_size=4))
def test_templates_raise_only_our_errors(template, doc):
    out = only_our_errors(render, template, doc, task="fuzz", field="doc_to_text", doc_index=0)
    assert out is None or isinstance(out, str)


@pytest.fixture(scope="module")
def encoder():
    from transformers import AutoTokenizer

    from tests.helpers.tiny_models import tiny_checkpoint

    return Encoder(AutoTokenizer.from_pretrained(tiny_checkpoint("llama")))


@FUZZ
@given(
    st.lists(st.tuples(st.text(max_size=40), st.text(max_size=20)), min_size=1, max_size=4),
    st.integers(2, 24),
)
def test_request_encoding_of_any_text(encoder, pairs, max_length):
    encoded = only_our_errors(encoder.encode_requests, pairs)
    if encoded is None:
        return
    assert len(encoded) == len(pairs)
    for ctx, cont in encoded:
        assert all(isinstance(t, int) for t in [*ctx, *cont])
    if all(cont for _, cont in encoded):
        only_our_errors(truncate_all, encoded, max_length)


@FUZZ
@given(st.lists(st.integers(3, 99), max_size=60), st.integers(1, 9))
def test_rolling_windows_score_every_token_once(ids, max_length):
    windows = rolling_windows(ids, prefix_token=1, max_length=max_length)
    assert [t for _, cont in windows for t in cont] == ids
    for ctx, cont in windows:
        assert 1 <= len(cont) <= max_length and len(ctx) + len(cont) <= max_length + 1

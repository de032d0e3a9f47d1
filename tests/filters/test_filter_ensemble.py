"""FilterEnsemble / build_filter_ensemble: same filtered_resps as lm-eval's, loud config errors."""

import pytest

import jaxeval.filters
from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.filters import FILTERS, FilterEnsemble, build_filter_ensemble

GENERATIONS = [
    ["So 3 + 4 = 7. #### 7", "#### 8", "#### 7"],
    ["The total is $1,200.", "#### 1,200", "I don't know"],
    ["#### -3", "#### -3", "#### 3"],
]
DOCS = [{"choices": ["7", "8"]}, {"choices": ["1,200", "12"]}, {"choices": ["-3", "3"]}]
PIPELINES = {
    "none": [("take_first", None)],
    "strict-match": [("regex", {"regex_pattern": r"#### (\-?[0-9\.\,]+)"}), ("take_first", {})],
    "flexible-extract": [
        ("regex", {"regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1}),
        ("take_first", {}),
    ],
    "maj@3": [("regex", {}), ("majority_vote", None), ("take_first", None)],
    "first-2": [("take_first_k", {"k": 2}), ("lowercase", {})],
    "mc": [("multi_choice_regex", {"regex_pattern": r"#### (\d+)"}), ("take_first", None)],
    "mapped": [
        ("remove_whitespace", {}),
        ("map", {"mapping_dict": {"#### 8": "eight"}}),
        ("take_first", {}),
    ],
}


def _ours():
    return [
        Instance("generate_until", doc, ("q", {}), idx=0, metadata=("t", i, 3), resps=list(gens))
        for i, (doc, gens) in enumerate(zip(DOCS, GENERATIONS))
    ]


def _theirs():
    from lm_eval.api.instance import Instance as LmInstance

    out = []
    for i, (doc, gens) in enumerate(zip(DOCS, GENERATIONS)):
        inst = LmInstance("generate_until", doc, ("q", {}), idx=0, metadata=("t", i, 3))
        inst.resps = list(gens)
        out.append(inst)
    return out


def test_public_names():
    assert set(jaxeval.filters.__all__) == {"FILTERS", "FilterEnsemble", "build_filter_ensemble"}
    assert set(FILTERS.names()) == {
        "take_first", "take_first_k", "majority_vote", "regex", "regex_pos", "remove_whitespace",
        "multi_choice_regex", "lowercase", "uppercase", "map", "format_span", "custom", "decontaminate",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_filtered_resps_equal_lm_eval(name):
    lm_filters = pytest.importorskip("lm_eval.filters")
    ours, theirs = _ours(), _theirs()
    build_filter_ensemble(name, PIPELINES[name]).apply(ours)
    lm_filters.build_filter_ensemble(name, PIPELINES[name]).apply(theirs)
    assert [i.filtered_resps for i in ours] == [i.filtered_resps for i in theirs]


def test_apply_hand_worked():
    instances = _ours()
    for name, components in PIPELINES.items():
        build_filter_ensemble(name, components).apply(instances)
    first = instances[0].filtered_resps
    assert first["none"] == "So 3 + 4 = 7. #### 7"
    assert first["strict-match"] == "7"
    assert first["maj@3"] == "7"
    assert instances[1].filtered_resps["strict-match"] == "[invalid]"
    assert instances[1].filtered_resps["flexible-extract"] == "$1,200."
    assert instances[1].filtered_resps["mc"] == "(A)"
    assert first["first-2"] == ["so 3 + 4 = 7. #### 7", "#### 8"]
    assert instances[0].resps == GENERATIONS[0]  # the raw responses are untouched


def test_ensemble_is_frozen_and_reusable():
    ens = build_filter_ensemble("strict-match", PIPELINES["strict-match"])
    assert isinstance(ens, FilterEnsemble)
    with pytest.raises(AttributeError):
        ens.name = "other"
    a, b = _ours(), _ours()
    ens.apply(a)
    ens.apply(b)
    assert [i.filtered_resps for i in a] == [i.filtered_resps for i in b]
    ens.apply([])  # nothing to do


def test_a_filter_must_return_one_value_per_instance():
    ens = build_filter_ensemble("bad", [("custom", {"filter_fn": lambda resps, docs: resps[:1]})])
    with pytest.raises(JaxevalError, match="1 results for 3 instances"):
        ens.apply(_ours())


@pytest.mark.parametrize(
    "components,message",
    [
        ([("regexx", {})], "unknown filter 'regexx'. Did you mean 'regex'"),
        ([("take_frist", None)], "Did you mean 'take_first'"),
        ([("regex", {"pattern": "x"})], "filter 'regex' has no option 'pattern'"),
        ([("take_first", {"k": 1})], "filter 'take_first' has no option 'k'"),
        ([("take_first_k", {})], "needs the option"),
        ([("take_first_k", {"k": 0})], "option 'k' must be a positive integer"),
        ([("regex", {"regex_pattern": "(unclosed"})], "not a valid regular expression"),
        ([("regex", {"group_select": "1"})], "option 'group_select' must be an integer"),
        ([("multi_choice_regex", {"regexes_to_ignore": "x"})], "must be a list"),
        ([("map", {"mapping_dict": ["a"]})], "option 'mapping_dict' must be a mapping"),
        ([("custom", {"filter_fn": "utils.f"})], "must be a function"),
        ([("custom", {})], "needs the option"),
    ],
)
def test_build_errors_name_the_problem(components, message):
    with pytest.raises(JaxevalError, match=message.replace("(", r"\(")) as err:
        build_filter_ensemble("my-filter", components)
    assert "filter_list[my-filter]" in str(err.value)

"""regex / regex_pos / remove_whitespace / multi_choice_regex equal lm-eval's."""

import pytest

from jaxeval.filters import FILTERS

GSM = [
    ["The answer is #### 1,234.", "#### -5 and #### 7"],
    ["no answer here", "####   "],
    ["#### 3.14\n#### 2", None],
    [42, "#### -0.5"],
    ["$1,200 then 7 and $3", "nothing"],
    ["", "(B) then (C)"],
]
DOCS = [{}] * len(GSM)
REGEX_OPTIONS = [
    {},
    {"group_select": -1},
    {"group_select": 1},
    {"regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1},
    {"regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": 0, "fallback": "?"},
    {"regex_pattern": r"\(([A-D])\)"},
    {"regex_pattern": r"(x)?(y)?"},  # matches the empty string: tuples of empty groups
    {"regex_pattern": r"(\d)(\d)?"},
    {"regex_pattern": r"[A-D]", "fallback": " pad "},
]


@pytest.mark.parametrize("options", REGEX_OPTIONS)
def test_regex_equals_lm_eval(lm_filter, options):
    if options.get("group_select") == 1:  # most responses have fewer matches: IndexError in both
        resps = [["#### -5 and #### 7", "#### 1 #### 2 #### 3"]]
        with pytest.raises(IndexError):
            FILTERS.get("regex")(GSM, DOCS, **options)
        with pytest.raises(IndexError):
            lm_filter("regex", GSM, DOCS, **options)
    else:
        resps = GSM
    docs = DOCS[: len(resps)]
    assert FILTERS.get("regex")(resps, docs, **options) == lm_filter(
        "regex", resps, docs, **options
    )


def test_regex_hand_worked():
    regex = FILTERS.get("regex")
    assert regex([["The answer is #### 1,234."]], [{}]) == [["1,234."]]
    assert regex([["no"]], [{}]) == [["[invalid]"]]
    assert regex([[None]], [{}], regex_pattern=r".*") == [[""]]  # non-str reads as ""
    flexible = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
    assert regex([["$12 or 7"]], [{}], regex_pattern=flexible, group_select=-1) == [["7"]]
    assert regex([["$12 or 7"]], [{}], regex_pattern=flexible, group_select=0) == [["$12"]]
    assert regex([["zz"]], [{}], regex_pattern=r"(x)?(y)?", fallback=" f ") == [["f"]]


POS = [
    ["[('The', 'DET'), ('cat', 'NOUN')]", "no tags", [("a", "X"), ("b", "Y")], []],
    ["('I', 'PRON')"],
]


def test_regex_pos_equals_lm_eval(lm_filter):
    docs = [{}] * len(POS)
    assert FILTERS.get("regex_pos")(POS, docs) == lm_filter("regex_pos", POS, docs)
    assert FILTERS.get("regex_pos")(POS, docs, fallback=["?"]) == lm_filter(
        "regex_pos", POS, docs, fallback=["?"]
    )
    assert FILTERS.get("regex_pos")(POS, docs)[0] == [
        ["DET", "NOUN"],
        ["invalid"],
        ["X", "Y"],
        ["invalid"],
    ]


def test_remove_whitespace_equals_lm_eval(lm_filter):
    resps = [["  42 \n", "x"], ["\t", ""]]
    assert FILTERS.get("remove_whitespace")(resps, [{}, {}]) == lm_filter(
        "remove_whitespace", resps, [{}, {}]
    )
    assert FILTERS.get("remove_whitespace")(resps, [{}, {}])[0] == ["42", "x"]


MC_DOCS = [
    {"choices": ["Paris", "Rome", "Berlin", "Madrid"]},
    {"choices": ["Guilty", "Guilty of Romance", "Innocent"]},
    {"choices": ["U.S.A.", "Canada!", "mexico"]},
    {"choices": ["yes", "no"]},
    {"choices": ["Paris", "Rome"]},
]
MC_RESPS = [
    ["I think Rome is right", "Answer: C", "The answer is (D).", "no idea", "#### 12"],
    ["It was Guilty of Romance", "guilty", "answer:B", "(A) obviously", ""],
    ["usa", "CANADA", "It is Mexico.", "Answer:   A", None],
    ["YES!", "no", ":b", "maybe", "(B)"],
    ["paris", "rome", "neither", "Paris or Rome", "answer: B"],
]
MC_OPTIONS = [
    {},
    {"regex_pattern": r"(\([A-D]\))", "group_select": 0},
    {"regex_pattern": r"(\([A-D]\))", "ignore_case": True, "ignore_punctuation": True},
    {"regex_pattern": r"(\([A-D]\))", "regexes_to_ignore": [",", r"\$"], "ignore_case": True},
    {"regex_pattern": r"answer is \(([A-D])\)", "fallback": "[none]", "group_select": -1},
    {"regex_pattern": r"(x)?(y)?"},
]


@pytest.mark.parametrize("options", MC_OPTIONS)
def test_multi_choice_regex_equals_lm_eval(lm_filter, options):
    resps = MC_RESPS
    if "regexes_to_ignore" in options or "ignore_case" in options:  # lm-eval can't take None then
        resps = [[r for r in inst if isinstance(r, str)] for inst in resps]
    ours = FILTERS.get("multi_choice_regex")(resps, MC_DOCS, **options)
    assert ours == lm_filter("multi_choice_regex", resps, MC_DOCS, **options)


def test_multi_choice_regex_hand_worked():
    mc = FILTERS.get("multi_choice_regex")
    docs = [{"choices": ["Guilty", "Guilty of Romance"]}]
    assert mc([["It was Guilty of Romance"]], docs) == [["(B)"]]  # the longest choice first
    assert mc([["Answer: A"]], docs) == [["(A)"]]
    assert mc([["nothing"]], docs) == [["[invalid]"]]
    opts = {"ignore_case": True, "ignore_punctuation": True}
    assert mc([["GUILTY, of romance?"]], [{"choices": ["Guilty, of Romance"]}], **opts) == [["(A)"]]

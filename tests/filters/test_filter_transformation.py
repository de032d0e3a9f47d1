"""lowercase / uppercase / map / format_span / custom / decontaminate equal lm-eval's."""

from jaxeval.filters import FILTERS

RESPS = [["Yes", "NO", "Maybe Ñ"], ["ß", "", " mixed Case "]]
DOCS = [{}, {}]


def test_case_filters(lm_filter):
    for name in ("lowercase", "uppercase"):
        assert FILTERS.get(name)(RESPS, DOCS) == lm_filter(name, RESPS, DOCS)
    assert FILTERS.get("lowercase")(RESPS, DOCS)[0] == ["yes", "no", "maybe ñ"]
    assert FILTERS.get("uppercase")(RESPS, DOCS)[1][0] == "SS"


def test_map(lm_filter):
    resps = [["A", "Z"], ["B", "A"]]
    for kwargs in (
        {"mapping_dict": {"A": 0, "B": 1}, "default_value": -1},
        {},
        {"mapping_dict": {"A": 0}},
    ):
        assert FILTERS.get("map")(resps, DOCS, **kwargs) == lm_filter("map", resps, DOCS, **kwargs)
    assert FILTERS.get("map")(resps, DOCS, mapping_dict={"A": 0}, default_value=-1) == [
        [0, -1],
        [-1, 0],
    ]


def test_format_span(lm_filter):
    resps = [
        [
            "Person: Ada, none\nplaces: Rome",
            "PER: Alan Turing $$ organization: GCHQ$$",
            "date : 1912\ncountry: UK, none, France",
            "no entities",
            "people:Bob$$loc: Paris, Lyon",
            "The person: Ada went to location: Personville",
        ]
    ]
    assert FILTERS.get("format_span")(resps, [{}]) == lm_filter("format_span", resps, [{}])
    assert FILTERS.get("format_span")(resps, [{}])[0][0] == "per: ada $ loc: rome"


def test_custom_and_decontaminate(lm_filter):
    def first_upper(resps, docs):
        return [[r[0].upper()] for r in resps]

    resps = [["a", "b"], ["c"]]
    assert FILTERS.get("custom")(resps, DOCS, filter_fn=first_upper) == lm_filter(
        "custom", resps, DOCS, filter_fn=first_upper
    )
    assert FILTERS.get("decontaminate")(resps, DOCS) is resps
    assert FILTERS.get("decontaminate")(resps, DOCS, path="x") is resps

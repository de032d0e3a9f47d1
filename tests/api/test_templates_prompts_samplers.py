"""Templates, prompt assembly and few-shot sampling, each against lm-eval's own functions."""

from __future__ import annotations

import random

import pytest

from jaxeval.api import prompt
from jaxeval.api.samplers import FirstNSampler, RandomSampler
from jaxeval.api.templates import render
from jaxeval.errors import JaxevalError


def test_render_keeps_trailing_newline_and_has_regex_replace():
    assert render("Q: {{q}}\n", {"q": "x"}) == "Q: x\n"
    assert render("{{ s | regex_replace('[0-9]+', '#') }}", {"s": "a1b22"}) == "a#b#"
    from lm_eval.utils import apply_template

    doc = {
        "question": "Why?",
        "choices": {"text": ["a", "b"], "label": ["A", "B"]},
        "answerKey": "B",
    }
    for tpl in [
        "Question: {{question}}\nAnswer:",
        "{{choices.label.index(answerKey)}}",
        "{{choices.text}}",
        "{{question.strip()}}\nA. {{choices.text[0]}}",
    ]:
        assert render(tpl, doc) == apply_template(tpl, doc)


def test_render_missing_variable_names_task_field_doc():
    with pytest.raises(JaxevalError) as e:
        render("{{nope}}", {"q": 1}, task="t", field="doc_to_text", doc_index=7)
    msg = str(e.value)
    assert "task 't'" in msg and "'doc_to_text'" in msg and "document 7" in msg and "nope" in msg


def test_render_is_sandboxed():
    from jinja2.exceptions import SecurityError

    with pytest.raises((JaxevalError, SecurityError)):
        render("{{ q.__class__.__mro__[1].__subclasses__() }}", {"q": "x"})


@pytest.mark.parametrize(
    "pre,suf,delim",
    [
        ("a", "b", " "),
        ("a ", "b", " "),
        ("a", " b", "\n"),
        ("", "b", " "),
        ("a", "", " "),
        (None, "b", " "),
        ("a\n", "b", "\n\n"),
    ],
)
def test_maybe_delimit_matches_lm_eval(pre, suf, delim):
    from lm_eval.api.utils import maybe_delimit

    assert prompt.maybe_delimit(pre, suf, delim) == maybe_delimit(pre, suf, delim)


def test_fewshot_string_examples_from_lm_eval_tests():
    msgs = (
        prompt.qa_turn("Q1", answer="A1")
        + prompt.qa_turn("Q2", answer="A2")
        + prompt.qa_turn("Q3", fewshot_delimiter="")
    )
    assert prompt.messages_to_text(msgs) == "Q1 A1\n\nQ2 A2\n\nQ3"
    system = prompt.Message(
        "system", prompt.maybe_delimit("Be helpful.", "Answer math questions.", "\n\n")
    )
    assert (
        prompt.messages_to_text([system, *prompt.qa_turn("2+2?", fewshot_delimiter="")])
        == "Be helpful.\n\nAnswer math questions.2+2?"
    )


@pytest.mark.parametrize("gen_prefix", [None, "Answer:", "Answer: "])
@pytest.mark.parametrize("q", ["Question?", "Question? "])
def test_qa_turn_matches_lm_eval_build_qa_turn(gen_prefix, q):
    from lm_eval.api.task import ConfigurableTask

    build = ConfigurableTask.build_qa_turn
    for kwargs in [dict(a="Paris"), dict(a=1, c=["x", "y"]), dict(a=["first", "second"]), dict()]:
        theirs = build(None, q=q, gen_prefix=gen_prefix, tgt_delim=" ", few_delim="\n\n", **kwargs)
        ours = prompt.qa_turn(
            q,
            choices=kwargs.get("c"),
            answer=kwargs.get("a"),
            gen_prefix=gen_prefix,
            target_delimiter=" ",
            fewshot_delimiter="\n\n",
        )
        assert [(m.role, m.content, m.delimiter) for m in ours] == [
            (m.role, m.content, m._delimiter) for m in theirs
        ]


def test_multiturn_to_singleturn_matches_lm_eval():
    from lm_eval.api.utils import Message, multiturn_to_singleturn

    spec = [
        ("system", "sys", ""),
        ("user", "Q1", " "),
        ("assistant", "A1", "\n\n"),
        ("user", "Q2", " "),
        ("assistant", "Answer:", ""),
    ]
    for msgs in (spec, spec[:-1], spec[1:]):
        theirs = multiturn_to_singleturn([Message(*m) for m in msgs])
        ours = prompt.multiturn_to_singleturn([prompt.Message(*m) for m in msgs])
        assert ours == theirs


def test_random_sampler_draws_what_lm_eval_draws():
    from lm_eval.api.samplers import ContextSampler
    from lm_eval.api.samplers import FirstNSampler as LmFirstN

    pool = [{"id": i, "q": f"q{i}"} for i in range(40)]
    docs = [{"id": 100 + i} for i in range(10)] + [pool[3], pool[17]]
    theirs = ContextSampler(pool, rnd=1234)
    ours = RandomSampler(pool, seed=1234)
    for doc in docs:
        for n in (1, 5):
            assert ours.sample(n, eval_doc=doc) == theirs.sample(n, eval_doc=doc)
    ours.set_seed(7)
    theirs.set_rnd(7)
    assert ours.sample(3) == theirs.sample(3)
    lm_first = LmFirstN(pool)
    assert FirstNSampler(pool).sample(5, eval_doc=pool[1]) == lm_first.sample(5, eval_doc=pool[1])


def test_fewshot_indices_subset_the_pool_first():
    pool = [{"id": i} for i in range(10)]
    s = RandomSampler(pool, seed=1, fewshot_indices=[2, 4, 6])
    assert all(d["id"] in (2, 4, 6) for d in s.sample(3))
    assert random.Random(1).sample([pool[2], pool[4], pool[6]], 3) == RandomSampler(
        pool, seed=1, fewshot_indices=[2, 4, 6]
    ).sample(3)


def test_sampler_errors_are_clear():
    with pytest.raises(JaxevalError, match="only 2"):
        RandomSampler([{"a": 1}, {"a": 2}], task="t").sample(5)
    with pytest.raises(JaxevalError, match="only 1"):
        FirstNSampler([{"a": 1}, {"a": 2}], task="t").sample(2, eval_doc={"a": 1})

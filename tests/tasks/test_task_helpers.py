"""The task helper modules (tasks/*/utils.py and friends): golden values, and the same outputs as
lm-eval's own helpers on every stored row (the helpers are our code, so behaviour is what is pinned).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest

from jaxeval.api.task_manager import builtin_task_dir
from tests.tasks.oracle import lm_eval_tasks_dir


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(rel: str):
    return _module(builtin_task_dir() / rel, "ours_" + rel.replace("/", "_")[:-3])


def theirs(rel: str):
    return _module(f"{lm_eval_tasks_dir()}/{rel}", "lm_eval_" + rel.replace("/", "_")[:-3])


def rows(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


# -- hellaswag ------------------------------------------------------------------------------------


def test_hellaswag_golden():
    hs = ours("hellaswag/utils.py")
    doc = {
        "activity_label": "Roof shingle removal",
        "ctx_a": "A man is sitting on a roof.",
        "ctx_b": "he",
        "endings": ["is using wrap.", " starts pulling up roofing [step] on a roof. "],
        "label": "1",
    }
    assert hs.process_doc(doc) == {
        "query": "Roof shingle removal: A man is sitting on a roof. He",
        "choices": ["is using wrap.", "starts pulling up roofing on a roof."],
        "gold": 1,
    }
    assert hs.clean("Make tea [title] Boil water [step] Pour.") == "Make tea. Boil water Pour."
    assert hs.clean("a   b") == "a  b"


def test_hellaswag_matches_lm_eval(data_root):
    hs, ref = ours("hellaswag/utils.py"), theirs("hellaswag/utils.py")
    docs = rows(data_root / "hellaswag/validation.jsonl")
    docs.append(
        {
            "activity_label": "Wiki [header]",
            "ctx_a": " x [title] y  ",
            "ctx_b": "z [step]  w",
            "endings": ["[title] A   b", "", " c ", "d [substeps] e"],
            "label": "2",
        }
    )
    for doc in docs:
        assert hs.process_doc(doc) == {
            "query": ref.preprocess(
                doc["activity_label"] + ": " + doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
            ),
            "choices": [ref.preprocess(e) for e in doc["endings"]],
            "gold": int(doc["label"]),
        }


# -- winogrande -----------------------------------------------------------------------------------


def test_winogrande_golden():
    wg = ours("winogrande/preprocess_winogrande.py")
    doc = {
        "sentence": "Sarah was a better surgeon than Maria so _ got the harder cases.",
        "option1": "Sarah",
        "option2": "Maria",
        "answer": "2",
    }
    assert wg.doc_to_text(doc) == 1
    assert wg.doc_to_target(doc) == "got the harder cases."
    assert wg.doc_to_choice(doc) == [
        "Sarah was a better surgeon than Maria so Sarah",
        "Sarah was a better surgeon than Maria so Maria",
    ]


def test_winogrande_matches_lm_eval(data_root):
    wg, ref = (
        ours("winogrande/preprocess_winogrande.py"),
        theirs("winogrande/preprocess_winogrande.py"),
    )
    for doc in rows(data_root / "winogrande/winogrande_xl/validation.jsonl"):
        for fn in ("doc_to_text", "doc_to_target", "doc_to_choice"):
            assert getattr(wg, fn)(doc) == getattr(ref, fn)(doc), (fn, doc)


# -- wikitext -------------------------------------------------------------------------------------


def test_wikitext_golden():
    wt = ours("wikitext/preprocess_wikitext.py")
    page = " = Valkyria = \n Senjō 3 : Unrecorded ( Japanese : 戦場 ) , 1 @,@ 000 @-@ yard . \n = = Plot = = \n"
    assert (
        wt.detokenize(page)
        == " = Valkyria =\nSenjō 3: Unrecorded (Japanese: 戦場), 1,000-yard.\n== Plot ==\n"
    )
    # "s '" closes the possessive first; the quote rule then eats the space before the next quote
    assert (
        wt.detokenize("the players ' \" best \" 5 ° C N it 's") == "the players'\"best\" 5°C 1 it's"
    )
    ll = -12.5
    assert wt.process_results({"page": " a b\nc "}, [ll]) == {
        "word_perplexity": (ll, 5),
        "byte_perplexity": (ll, 7),
        "bits_per_byte": (ll, 7),
    }  # words: "", a, b, c, ""


def test_wikitext_matches_lm_eval(data_root):
    wt, ref = ours("wikitext/preprocess_wikitext.py"), theirs("wikitext/preprocess_wikitext.py")
    docs = rows(data_root / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl")
    docs.append({"page": "( a ) [ b ] { c } \" d \" ' e ' = = = = f = = = g ° h s ' i /' 1/ j"})
    for i, doc in enumerate(docs):
        assert wt.wikitext_detokenizer(doc) == ref.wikitext_detokenizer(doc), i
        assert wt.process_results(doc, [-float(i)]) == ref.process_results(doc, [-float(i)]), i


# -- truthfulqa -----------------------------------------------------------------------------------


def test_truthfulqa_mc2_golden():
    tq = ours("truthfulqa/utils.py")
    out = tq.process_results_mc2(
        {"mc2_targets": {"labels": [1, 1, 0]}}, [(-1.0, False), (-2.0, False), (-3.0, True)]
    )
    e = [math.exp(-1), math.exp(-2), math.exp(-3)]
    assert out["acc"] == pytest.approx((e[0] + e[1]) / sum(e), rel=1e-15)


def test_truthfulqa_mc2_matches_lm_eval():
    tq, ref = ours("truthfulqa/utils.py"), theirs("truthfulqa/utils.py")
    rnd = random.Random(0)
    for _ in range(200):
        n = rnd.randint(2, 12)
        labels = [rnd.randint(0, 1) for _ in range(n)]
        results = [(-rnd.uniform(0, 80), rnd.random() < 0.3) for _ in range(n)]
        doc = {"mc2_targets": {"labels": labels}}
        assert tq.process_results_mc2(doc, results) == ref.process_results_mc2(doc, results)


@pytest.mark.slow
def test_truthfulqa_gen_matches_lm_eval():
    tq, ref = ours("truthfulqa/utils.py"), theirs("truthfulqa/utils.py")
    docs = rows(Path(__file__).parent / "data/truthful_qa/generation/validation.jsonl")
    completions = [
        "",
        " It passes through your digestive system.",
        "I have no comment.",
        " The sun is yellow",
        "Bulls react to the movement . Red does nothing .",
        "five senses five senses",
    ]
    for doc in docs:
        processed = tq.preprocess_doc_gen(doc)
        assert processed == ref.preprocess_function(doc)
        assert processed["correct_answers"][-1].endswith(".")
        for completion in completions:
            assert tq.process_results_gen(processed, [completion]) == ref.process_results_gen(
                processed, [completion]
            )

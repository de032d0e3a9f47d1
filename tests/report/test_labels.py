"""Run labels: the model's shortest distinct name, then only the settings that differ."""

from __future__ import annotations

import pytest

from jaxeval.report.labels import run_labels, settings_of, short_names


def _results(model_args: str, **extra) -> dict:
    config = {"model_args": model_args, "limit": extra.pop("limit", None)}
    return {"config": config, "n-shot": extra.pop("n_shot", {"arc_easy": 0}), **extra}


def _labels(*results: dict, steps=None) -> list[str]:
    n = len(results)
    return run_labels(
        list(results), steps or [None] * n, ["lm-eval"] * n, [f"d{i}" for i in range(n)]
    )


def test_short_names_docstring_example():
    paths = ["/a/x/final", "/b/y/final", "/b/y/step-9", "org/model"]
    assert short_names(paths) == {
        "/a/x/final": "x/final",
        "/b/y/final": "y/final",
        "/b/y/step-9": "step-9",
        "org/model": "org/model",
    }


def test_labels_docstring_table():
    runs = [
        _results("pretrained=/ckpt/exp1/checkpoint-100"),
        _results("pretrained=/ckpt/exp2/checkpoint-100"),
        _results("pretrained=/ckpt/exp2/checkpoint-200"),
        _results("pretrained=HuggingFaceTB/SmolLM2-135M"),
        _results("pretrained=HuggingFaceTB/SmolLM2-135M", n_shot={"arc_easy": 5}),
        _results("pretrained=/models/q,gguf_file=smol-q8_0.gguf"),
    ]
    assert _labels(*runs, steps=[100, 100, 200, None, None, None]) == [
        "exp1/checkpoint-100",
        "exp2/checkpoint-100",
        "checkpoint-200",
        "HuggingFaceTB/SmolLM2-135M · 0-shot",
        "HuggingFaceTB/SmolLM2-135M · 5-shot",
        "smol-q8_0.gguf",
    ]


def test_gguf_files_of_one_folder_are_named_by_file():
    q8 = _results("pretrained=/models/smollm2,gguf_file=smollm2-q8_0.gguf")
    q4 = _results("pretrained=/models/smollm2,gguf_file=/models/smollm2/smollm2-q4_k_m.gguf")
    assert _labels(q8, q4) == ["smollm2-q8_0.gguf", "smollm2-q4_k_m.gguf"]


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ({"limit": 100}, {}, ["m · limit 100", "m · all documents"]),
        (
            {"model_args": "pretrained=m,dtype=float32"},
            {"model_args": "pretrained=m,dtype=bfloat16"},
            ["m · dtype=float32", "m · dtype=bfloat16"],
        ),
        ({"chat_template_sha": "ab12cd34ef"}, {}, ["m · chat template", "m · no chat template"]),
        (
            {"chat_template_sha": "ab12cd34ef"},
            {"chat_template_sha": "9f8e7d6c5b"},
            ["m · chat template ab12cd3", "m · chat template 9f8e7d6"],
        ),
        (
            {"n_shot": {"arc_easy": 0, "wikitext": 0}, "model_args": "pretrained=m,dtype=bfloat16"},
            {"n_shot": {"arc_easy": 5, "wikitext": 0}},
            ["m · 0-shot · dtype=bfloat16", "m · 5-shot"],  # n-shot of the tasks that differ
        ),
        ({}, {}, ["m (d0)", "m (d1)"]),  # nothing differs: the date
    ],
)
def test_what_differs_is_named(a, b, expected):
    def run(extra):
        extra = dict(extra)
        return _results(extra.pop("model_args", "pretrained=m"), **extra)

    assert _labels(run(a), run(b)) == expected


def test_settings_of_a_run():
    results = _results(
        "pretrained=/very/long/path/to/model,dtype=bfloat16,max_length=4096,tokenizer=/tok/dir",
        n_shot={"arc_easy": 0, "gsm8k": 5},
        limit=0.5,
        chat_template="{{ messages }}",
        chat_template_sha="0123456789",
        fewshot_as_multiturn=True,
    )
    assert settings_of(results) == {
        "n-shot": "0-shot (gsm8k 5-shot)",
        "limit": "limit 0.5",
        "model_args.dtype": "dtype=bfloat16",
        "model_args.max_length": "max_length=4096",
        "model_args.tokenizer": "tokenizer=…/dir",  # a path: its last part
        "chat template": "chat template 0123456",
        "multiturn": "few-shot as multi-turn",
        "system": "",
    }


def test_n_shot_of_tasks_that_differ():
    shots = {"arc_easy": 5, "lambada_openai": 5, "wikitext": 0}
    assert (
        settings_of(_results("pretrained=m", n_shot=shots))["n-shot"] == "5-shot (wikitext 0-shot)"
    )
    assert settings_of(_results("pretrained=m", n_shot={}))["n-shot"] == ""

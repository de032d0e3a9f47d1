"""Requests built from real benchmark rows in tests/data, the way lm-eval's task YAMLs build them.

Small on purpose (tests run on 2 CPU cores); each builder returns `(context, continuation)` pairs or,
for rolling, `(text,)` tuples.
"""

from __future__ import annotations

import json
import pathlib
import re


def _rows(path: pathlib.Path, n: int) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


def arc_easy(data: pathlib.Path, n: int) -> list[tuple[str, str]]:
    """arc_easy: `Question: {q}\\nAnswer:` + ` {choice}` for every choice."""
    out = []
    for row in _rows(data / "ai2_arc/ARC-Easy/validation.jsonl", n):
        ctx = f"Question: {row['question']}\nAnswer:"
        out.extend((ctx, " " + c) for c in row["choices"]["text"])
    return out


def _hellaswag_pre(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def hellaswag(data: pathlib.Path, n: int) -> list[tuple[str, str]]:
    out = []
    for row in _rows(data / "hellaswag/validation.jsonl", n):
        query = _hellaswag_pre(
            row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize()
        )
        out.extend((query, " " + _hellaswag_pre(e)) for e in row["endings"])
    return out


def lambada(data: pathlib.Path, n: int, skip: int = 0) -> list[tuple[str, str]]:
    """lambada_openai: context = text minus its last word, continuation = ' ' + last word."""
    out = []
    for row in _rows(data / "lambada_openai/test.jsonl", skip + n)[skip:]:
        words = row["text"].split(" ")
        out.append((" ".join(words[:-1]), " " + words[-1]))
    return out


def mmlu(data: pathlib.Path, n: int, subject: str = "anatomy") -> list[tuple[str, str]]:
    """mmlu letters (one-token continuations) plus acc_mutual_info's unconditional requests."""
    out = []
    for row in _rows(data / f"mmlu/{subject}/test.jsonl", n):
        prompt = row["question"].strip() + "\n"
        prompt += "".join(f"{k}. {c}\n" for k, c in zip("ABCD", row["choices"])) + "Answer:"
        out.extend((prompt, " " + k) for k in "ABCD")
        out.extend(("", " " + c) for c in row["choices"][:2])
    return out


def wikitext_pages(data: pathlib.Path, n: int, chars: int = 1300) -> list[tuple[str]]:
    """The first n wikitext-2 document-level pages, each cut after its last line end within
    `chars` characters (about 300 tokens: still several 128-token windows each)."""
    with open(data / "wikitext_document_level/wikitext-2-raw-v1/test.jsonl", encoding="utf-8") as f:
        pages = [json.loads(line)["page"] for _, line in zip(range(n), f)]
    return [(p[: p.rfind("\n", 0, chars) + 1] or p[:chars],) for p in pages]

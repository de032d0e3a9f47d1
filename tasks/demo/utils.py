"""Loads the demo tasks' bundled rows (`data/`, hub layout), so the demo needs no dataset hub."""

import os

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def _load(files):
    import datasets

    return datasets.load_dataset(
        "json", data_files={split: os.path.join(DATA, rel) for split, rel in files.items()}
    )


def load_arc(**kwargs):
    return _load({"test": "ai2_arc/ARC-Easy/test.jsonl"})


def load_hellaswag(**kwargs):
    return _load({"validation": "hellaswag/validation.jsonl"})


def load_lambada(**kwargs):
    return _load({"test": "lambada_openai/test.jsonl"})


def load_wikitext(**kwargs):
    return _load({"test": "wikitext_document_level/wikitext-2-raw-v1/test.jsonl"})


def load_gsm8k(**kwargs):
    return _load({"test": "gsm8k/test.jsonl", "train": "gsm8k/train.jsonl"})

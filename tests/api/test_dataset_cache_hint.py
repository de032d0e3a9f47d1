"""A dataset that fails to load gets the hint that fits the cause: a damaged datasets cache is not
an unreachable hub."""

from __future__ import annotations

import json

import pytest

from jaxeval.api.data import load_task_dataset
from jaxeval.errors import JaxevalError


def test_a_damaged_datasets_cache_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"q": f"x{i}", "a": i}) + "\n" for i in range(20)))
    cache = tmp_path / "cache"
    kwargs = {"data_files": {"test": str(rows)}, "cache_dir": str(cache)}
    load = dict(task="t", dataset_path="json", dataset_name=None, dataset_kwargs=kwargs)
    assert len(load_task_dataset(**load)["test"]) == 20
    arrows = list(cache.rglob("*.arrow"))
    assert arrows
    for arrow in arrows:
        with open(arrow, "r+b") as f:
            f.write(b"\0" * 64)
    with pytest.raises(JaxevalError) as err:
        load_task_dataset(**load)
    text = str(err.value)
    assert "cannot be reached" not in text, text
    assert "damaged" in text and str(cache) in text and "HF_DATASETS_CACHE" in text, text
    assert "--data_dir" in text

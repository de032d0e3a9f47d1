"""The committed runs under tests/report/data are what lm-eval 0.4.13 and jaxeval write today:
regenerated here (tests/report/runs.py), the scores and every document's values are the same."""

from __future__ import annotations

import json

import pytest

from tests.report.runs import RUNS, write_all

pytestmark = [pytest.mark.slow, pytest.mark.oracle]


def _read(folder):
    (results,) = folder.rglob("results_*.json")
    out = {"results": json.loads(results.read_text())["results"]}
    for samples in sorted(folder.rglob("samples_*.jsonl")):
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        task = samples.name.rsplit("_", 1)[0]  # samples_<task>, from samples_<task>_<date>.jsonl
        out[task] = [
            {k: r[k] for k in ("doc_id", "filter", "doc_hash", "filtered_resps", *r["metrics"])}
            for r in rows
        ]
    return out


def test_committed_runs_are_current(tmp_path):
    write_all(tmp_path)
    for name in ("lm_eval", "jaxeval", "jaxeval_b"):
        assert _read(tmp_path / name) == _read(RUNS / name), name

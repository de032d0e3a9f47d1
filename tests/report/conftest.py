"""The committed runs (tests/report/runs.py made them) and writable copies of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.report.runs import RUNS


@pytest.fixture
def lm_eval_dir() -> Path:
    return RUNS / "lm_eval"


@pytest.fixture
def jaxeval_dir() -> Path:
    return RUNS / "jaxeval"


@pytest.fixture
def jaxeval_b_dir() -> Path:
    return RUNS / "jaxeval_b"


@pytest.fixture
def copy_run(tmp_path):
    """copy_run(folder, name) -> a writable copy under tmp_path, and its results file."""

    def copy(folder: Path, name: str) -> tuple[Path, Path]:
        target = tmp_path / name
        shutil.copytree(folder, target)
        (results,) = target.rglob("results_*.json")
        return target, results

    return copy

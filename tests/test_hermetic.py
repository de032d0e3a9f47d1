"""The suite stands alone: rows under tests/data only, nothing read while test modules import.

tests/conftest.py records, with an audit hook, every file opened under tests/data while pytest
collects (imports) the test modules, and every file opened beside the repository (../shared) at any
time; a skip whose reason mentions missing data is turned into a failure there as well.
"""

from __future__ import annotations

import json

from tests import conftest
from tests.helpers.copy_rows import DATA, ROWS


def test_nothing_under_tests_data_is_read_at_import():
    assert conftest.READ_AT_IMPORT == [], "read these at call time (a fixture or a cached function)"


def test_nothing_beside_the_repository_was_read_so_far():
    assert conftest.READ_BESIDE_REPO == []


def test_every_copied_file_is_in_the_hub_layout_with_its_rows():
    assert conftest.TEST_DATA == DATA
    for rel, n in ROWS.items():
        path = DATA / rel
        assert path.is_file(), f"{path} is missing: python -m tests.helpers.copy_rows <data root>"
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        assert len(rows) >= n, (rel, len(rows), n)
    assert sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file()) < 4 * 2**20

"""Shared fixture: one lm-eval TaskManager over override YAMLs for every parity case.

Indexing lm-eval's task library takes about 9 s, so the whole session shares one manager.
"""

from __future__ import annotations

import pytest

from tests.tasks.cases import CASES
from tests.tasks.oracle import write_lm_eval_overrides


@pytest.fixture(scope="session")
def lm_eval_manager(tmp_path_factory, data_root):
    from lm_eval.tasks import TaskManager

    out = tmp_path_factory.mktemp("lm_eval_overrides")
    write_lm_eval_overrides(list(CASES.values()), out)
    return TaskManager(include_path=str(out))

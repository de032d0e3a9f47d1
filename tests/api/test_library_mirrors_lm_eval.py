"""Every task/group YAML in the library (bar the demo) mirrors the lm-eval 0.4.13 file at the same
relative path: the same dict from each side's own loader (includes merged, functions by name)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jaxeval.api.task_manager import builtin_task_dir

OURS = builtin_task_dir()
FILES = sorted(p for p in OURS.glob("**/*.yaml") if "demo" not in p.parts)


def _theirs_dir() -> Path:
    import lm_eval.tasks

    return Path(os.path.dirname(lm_eval.tasks.__file__))


def _normalise(value):
    """An unresolved `!function utils.fn` is a plain name on our side and '<dir>/utils.fn' on lm-eval's."""
    return os.path.basename(value) if isinstance(value, str) and os.path.isabs(value) else value


def test_library_is_not_empty():
    assert len(FILES) > 80


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(OURS)))
def test_yaml_equals_lm_eval(path):
    from lm_eval.tasks._yaml_loader import load_yaml as lm_eval_load_yaml

    from jaxeval.api.yaml_loader import load_yaml

    rel = path.relative_to(OURS)
    theirs_path = _theirs_dir() / rel
    assert theirs_path.is_file(), f"lm-eval has no {rel}"
    ours = load_yaml(path, resolve_functions=False)
    theirs = lm_eval_load_yaml(theirs_path, resolve_func=False)
    assert {k: _normalise(v) for k, v in ours.items()} == {
        k: _normalise(v) for k, v in theirs.items()
    }

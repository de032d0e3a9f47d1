"""Tests that need torch skip where torch is not installed, saying so; jaxeval never needs it.

The Python 3.12 CI leg runs without torch (no CPU torch wheel is at hand there, and a plain
`pip install torch` pulls a CUDA build of several GB). A test needs torch when

* it is marked `needs_torch`: skipped before it runs, or
* its setup or body imports torch without passing through jaxeval's own code: the tiny
  checkpoints (tests/helpers/tiny_models.py builds them with transformers on torch), the
  transformers and lm-eval HF oracles, bert-score. Such a failure is reported as a skip.

An import of torch reached through jaxeval's own code still fails the test: jaxeval runs on JAX
alone, and the leg without torch is where that shows. A module that imports torch at its top skips
with `pytest.importorskip("torch", reason=REASON)`. Loaded by the repository's conftest.py; a no-op
where torch is installed.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

JAXEVAL = pathlib.Path(__file__).resolve().parents[1] / "jaxeval"
REASON = (
    "needs torch, which is not installed here: the tiny checkpoints and the transformers and "
    "lm-eval HF oracles run on torch"
)
TORCH_INSTALLED = importlib.util.find_spec("torch") is not None


def missing_torch_import(excinfo: pytest.ExceptionInfo) -> bool:
    """Whether `excinfo` is an import of the missing torch (or a submodule) that no frame of
    jaxeval's own code led to."""
    error = excinfo.value
    if not isinstance(error, ModuleNotFoundError) or (error.name or "").split(".")[0] != "torch":
        return False
    for entry in excinfo.traceback:
        path = str(entry.path)
        if not path.startswith("<") and JAXEVAL in pathlib.Path(path).resolve().parents:
            return False
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if TORCH_INSTALLED:
        return
    for item in items:
        if item.get_closest_marker("needs_torch"):
            item.add_marker(pytest.mark.skip(reason=REASON))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if TORCH_INSTALLED or not report.failed or call.excinfo is None:
        return
    if missing_torch_import(call.excinfo):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {REASON}")

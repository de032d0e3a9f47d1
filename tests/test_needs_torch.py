"""tests/needs_torch.py: without torch, tests that need it skip, saying so; jaxeval's own code
importing torch still fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests import needs_torch
from tests.conftest import _MISSING_DATA, REPO


def _excinfo_from(source: str, filename: str) -> pytest.ExceptionInfo:
    try:
        exec(compile(source, filename, "exec"), {})
    except BaseException:  # noqa: BLE001 - the test inspects whatever came out
        return pytest.ExceptionInfo.from_exc_info(sys.exc_info())
    raise AssertionError("the source raised nothing")


RAISE_TORCH = "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')"


def test_an_import_from_test_code_or_an_oracle_library_counts():
    for filename in (str(REPO / "tests" / "helpers" / "fake.py"), "/site-packages/lm_eval/x.py"):
        assert needs_torch.missing_torch_import(_excinfo_from(RAISE_TORCH, filename))
    nested = RAISE_TORCH.replace("'torch'", "'torch.nn'")
    assert needs_torch.missing_torch_import(_excinfo_from(nested, "/site-packages/x.py"))


def test_an_import_through_jaxeval_or_of_another_module_does_not():
    jaxeval_file = str(needs_torch.JAXEVAL / "lm" / "fake.py")
    assert not needs_torch.missing_torch_import(_excinfo_from(RAISE_TORCH, jaxeval_file))
    other = RAISE_TORCH.replace("'torch'", "'torchvision'")
    assert not needs_torch.missing_torch_import(_excinfo_from(other, "/tests/x.py"))
    assert not needs_torch.missing_torch_import(_excinfo_from("1 / 0", "/tests/x.py"))


def test_the_reason_is_not_a_missing_data_skip():
    # tests/conftest.py fails any skip whose reason reads as missing data.
    assert not any(word in needs_torch.REASON.lower() for word in _MISSING_DATA)


def test_a_session_without_torch_skips_what_needs_it(tmp_path):
    # A pytest session of its own, on a machine made torch-less: `import torch` fails as it does
    # where torch is not installed.
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""\
            import sys
            from tests import needs_torch
            needs_torch.TORCH_INSTALLED = False
            sys.modules["torch"] = None
            """)
    )
    (tmp_path / "test_cases.py").write_text(
        textwrap.dedent("""\
            import pytest

            @pytest.fixture(scope="module")
            def oracle():
                import torch  # noqa: F401

            def test_imports_torch():
                import torch  # noqa: F401

            def test_fixture_imports_torch(oracle):
                pass

            @pytest.mark.needs_torch
            def test_marked():
                raise AssertionError("a marked test does not run without torch")

            def test_other_failure():
                raise AssertionError("still a failure")

            def test_passes():
                pass
            """)
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    needs_torch: needs torch\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.needs_torch", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-q", "-rfs", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    out = done.stdout
    assert "1 failed, 1 passed, 3 skipped" in out, out
    assert "FAILED test_cases.py::test_other_failure" in out, out
    assert out.count(needs_torch.REASON) == 3, out

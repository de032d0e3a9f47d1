"""examples/colab_tpu.ipynb runs top to bottom on CPU (nbclient, a fresh Python kernel, offline)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

nbclient = pytest.importorskip(
    "nbclient", reason="nbclient is a test extra (pip install -e .[test])"
)


def test_colab_notebook_executes():
    import nbformat

    path = REPO / "examples" / "colab_tpu.ipynb"
    nb = nbformat.read(path, as_version=4)
    env_keep = {k: os.environ.get(k) for k in ("XLA_FLAGS",)}
    os.environ.pop("XLA_FLAGS", None)  # the kernel sees one CPU device, as on a laptop
    try:
        client = nbclient.NotebookClient(
            nb,
            timeout=120,
            kernel_name="python3",
            resources={"metadata": {"path": str(REPO / "examples")}},
        )
        client.execute()
    finally:
        for key, value in env_keep.items():
            if value is not None:
                os.environ[key] = value
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "word perplexity" in outputs and "|demo_arc_easy|" in outputs

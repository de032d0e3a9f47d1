"""The package layout: tasks/ installs as jaxeval.tasks, the kernels are jaxeval/kernels/ (import
path = file path), never a top-level `kernels` module, in an editable install and in a built wheel,
with the YAML files."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = """
import importlib.util, json, sys
from importlib import resources
import jaxeval.kernels, jaxeval.tasks
tasks = resources.files("jaxeval.tasks")
print(json.dumps({
    "kernels": jaxeval.kernels.__file__,
    "tasks": jaxeval.tasks.__file__,
    "arc": (tasks / "arc" / "arc_easy.yaml").is_file(),
    "mmlu_template": (tasks / "mmlu" / "default" / "_default_template_yaml").is_file(),
    "demo_utils": (tasks / "demo" / "utils.py").is_file(),
    "top_level_kernels": [p for p in sys.path if p and __import__("os").path.isdir(__import__("os").path.join(p, "kernels"))
                          and __import__("os").path.isfile(__import__("os").path.join(p, "kernels", "score.py"))],
}))
"""


def _check(env: dict, cwd: str) -> dict:
    import json

    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, cwd=cwd, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_editable_install_maps_kernels_and_tasks(tmp_path):
    info = _check(dict(os.environ), str(tmp_path))
    assert info["kernels"] == str(REPO / "jaxeval" / "kernels" / "__init__.py")
    assert info["tasks"] == str(REPO / "tasks" / "__init__.py")
    assert info["arc"] and info["mmlu_template"] and info["demo_utils"]
    assert info["top_level_kernels"] == []


@pytest.mark.slow
def test_built_wheel_has_namespaced_kernels_tasks_and_yaml(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("jaxeval-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "jaxeval/kernels/__init__.py" in names and "jaxeval/tasks/arc/arc_easy.yaml" in names
    assert not any(n.startswith("kernels/") or n.startswith("tasks/") for n in names)
    assert "jaxeval/tasks/mmlu/default/mmlu_anatomy.yaml" in names
    assert "jaxeval/configs/meshes.yaml" in names
    assert "jaxeval/ops/attention/cpu_attention.cc" in names  # built on first use on the CPU
    assert "jaxeval/metrics/bootstrap_kernel.cc" in names  # the bootstrap's, built on first use
    assert "jaxeval/tasks/demo/expected.json" in names  # the demo's lm-eval reference column
    assert "jaxeval/tasks/demo/data/gsm8k/train.jsonl" in names  # its bundled rows
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONNOUSERSITE="1")
    # Run outside the repo and ahead of the editable finder: the wheel's copy must be found.
    info = _check(env, str(tmp_path))
    assert info["kernels"].startswith(str(target)) and info["tasks"].startswith(str(target))
    assert info["arc"] and info["mmlu_template"]


def test_import_kernels_from_the_repository_root_never_gets_ours():
    """From the repository's root (on sys.path), `import kernels` is Hugging Face's package when it
    is installed (transformers 5.25+ imports it) and an ImportError otherwise, never our folder;
    `jaxeval.kernels` is ours either way."""
    code = (
        "import json\n"
        "try:\n"
        "    import kernels\n"
        "    got = kernels.__file__\n"
        "except ImportError:\n"
        "    got = None\n"
        "import jaxeval.kernels\n"
        "print(json.dumps([got, jaxeval.kernels.__file__, hasattr(jaxeval.kernels, 'score')]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    got, ours, has_score = __import__("json").loads(out.strip().splitlines()[-1])
    assert has_score and Path(ours).resolve() == REPO / "jaxeval" / "kernels" / "__init__.py"
    assert got is None or Path(got).resolve().parent != REPO / "jaxeval" / "kernels"
    assert not (REPO / "kernels").exists()

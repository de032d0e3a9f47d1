"""The suite stands alone: rows under tests/data only, nothing read while test modules import,
every cache (jaxeval's, Hugging Face's, torch's, ...) under the session's own temporary root, the
user's caches never opened or changed.

tests/conftest.py records, with an audit hook, every file opened under tests/data while pytest
collects (imports) the test modules, and every file opened beside the repository (../shared) at any
time; a skip whose reason mentions missing data is turned into a failure there as well.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

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


def test_every_cache_lives_under_the_sessions_own_root():
    """jaxeval's caches (task index, requests, kernels, compiled executables, models) resolve
    under the session's temporary root, never under the user's real cache."""
    from jaxeval import paths
    from jaxeval.platform import compile_cache

    root = paths.cache_home().resolve()
    assert root == conftest.SESSION_CACHE
    assert conftest.USER_CACHE not in root.parents and root != conftest.USER_CACHE
    for kind in ("xla", "models", "requests", "task_index", "kernels"):
        assert conftest.SESSION_CACHE in paths.cache_dir(kind).resolve().parents
    assert conftest.SESSION_CACHE in pathlib.Path(compile_cache.default_dir()).resolve().parents
    assert str(conftest.USER_CACHE) + os.sep in conftest.FORBIDDEN


def test_every_library_cache_lives_under_the_sessions_own_root():
    """Hugging Face's hub, datasets, evaluate and modules caches, torch's and matplotlib's, and
    anything that follows $XDG_CACHE_HOME resolve under the session's temporary root, set before
    those libraries read them at import."""
    import datasets.config
    import huggingface_hub.constants
    from transformers.utils import hub as transformers_hub

    paths = {
        "datasets": datasets.config.HF_DATASETS_CACHE,
        "datasets modules": datasets.config.HF_MODULES_CACHE,
        "hub": huggingface_hub.constants.HF_HUB_CACHE,
        "hub home": huggingface_hub.constants.HF_HOME,
        "hub token": huggingface_hub.constants.HF_TOKEN_PATH,
        "xet": huggingface_hub.constants.HF_XET_CACHE,
        "transformers modules": transformers_hub.HF_MODULES_CACHE,
        **{name: os.environ[name] for name in ("XDG_CACHE_HOME", "MPLCONFIGDIR", "TORCH_HOME")},
    }
    try:  # torch is not installed on every leg
        import torch.hub

        paths["torch"] = torch.hub.get_dir()
    except ImportError:
        pass
    try:
        import evaluate.config

        paths["evaluate"] = evaluate.config.HF_EVALUATE_CACHE
        paths["evaluate modules"] = evaluate.config.HF_MODULES_CACHE
    except ImportError:
        pass
    outside = {
        name: str(path)
        for name, path in paths.items()
        if conftest.TEST_ROOT not in pathlib.Path(path).resolve().parents
    }
    assert not outside, outside
    for user_hf in conftest.USER_HF_CACHES:
        assert str(user_hf) + os.sep in conftest.FORBIDDEN


def test_loading_a_dataset_writes_its_cache_under_the_root_only(tmp_path):
    """`datasets` writes its Arrow cache under the session's root; the user's Hugging Face caches
    are not changed (a listing before and after) nor opened."""
    import datasets

    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps({"q": f"row {i}", "n": i}) + "\n" for i in range(5)))
    before = conftest.listing(conftest.USER_HF_CACHES)
    rows = datasets.load_dataset("json", data_files={"test": str(source)}, split="test")
    assert rows["n"] == list(range(5))
    assert conftest.listing(conftest.USER_HF_CACHES) == before
    written = conftest.listing((pathlib.Path(datasets.config.HF_DATASETS_CACHE),))
    assert any(path.endswith(".arrow") for path, _, _ in written)
    assert conftest.READ_BESIDE_REPO == []


@pytest.mark.parametrize("home_at", ["beside", "above"])
def test_forbidden_folders_are_the_repositorys_real_siblings(tmp_path, home_at):
    """The siblings of the clone are forbidden, except hidden folders and those holding the home
    folder, this Python or the temporary folder: a home beside the clone is not one of them, and
    neither is the home a clone sits in; the user's caches always are."""
    root = tmp_path / "box"
    home = root / "home"
    repo = root / "home" / "jaxeval" if home_at == "above" else root / "jaxeval"
    for folder in (repo, root / "home" / "Documents", root / "shared", root / ".hidden"):
        folder.mkdir(parents=True, exist_ok=True)
    user_cache = home / ".cache" / "jaxeval"
    hf = (home / ".cache" / "huggingface",)
    found = conftest.forbidden_prefixes(repo, user_cache, home=home, user_hf=hf)
    siblings = {p for p in found if p.rstrip(os.sep) not in (str(user_cache), str(hf[0]))}
    if home_at == "beside":
        assert siblings == {str(root / "shared") + os.sep}
    else:  # the clone inside the home: its siblings are the home's other folders
        assert siblings == {str(home / "Documents") + os.sep}
    assert str(user_cache) + os.sep in found and str(hf[0]) + os.sep in found


def _snapshot(root: pathlib.Path) -> list[tuple[str, int, int]]:
    """Every file under `root` with its size and modification time (empty when absent)."""
    if not root.exists():
        return []
    return sorted(
        (str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    )


_NOT_SOURCE = {
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".test-models",
}


def _repository_files() -> list[str]:
    """The clone's files: git's list (tracked and not ignored) in a checkout, else every file but
    virtual environments, caches and build outputs (CI's copy of the tree has no .git)."""
    if (conftest.REPO / ".git").exists():
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=conftest.REPO,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return [rel for rel in listed.split("\0") if rel]
    out = []
    for path in conftest.REPO.rglob("*"):
        parts = path.relative_to(conftest.REPO).parts
        if any(p in _NOT_SOURCE or p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        out.append(str(path.relative_to(conftest.REPO)))
    return out


@pytest.mark.slow
def test_a_clone_inside_a_home_folder_passes_and_leaves_the_users_cache_alone(tmp_path):
    """The suite's own files copied into `<temporary HOME>/jaxeval`, as a user clones into their
    home: the hermetic checks and a cache-writing module (the task index) pass there, and
    neither that HOME's `~/.cache/jaxeval` nor the real user cache is created or changed."""
    if os.environ.get("JAXEVAL_INNER_SUITE"):
        pytest.skip("inside the inner run")
    home = tmp_path / "home"
    clone = home / "jaxeval"
    for rel in _repository_files():
        src = conftest.REPO / rel
        if src.is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / rel)
    real_before = _snapshot(conftest.USER_CACHE)
    hf_before = conftest.listing(conftest.USER_HF_CACHES)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAXEVAL_CACHE", "XDG_CACHE_HOME", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")
        and not k.startswith("PYTEST_")
    }
    env.update(HOME=str(home), JAXEVAL_INNER_SUITE="1", PYTHONDONTWRITEBYTECODE="1")
    env["JAXEVAL_TEST_MODELS"] = str(conftest.TEST_MODELS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "tests/test_hermetic.py", "tests/api/test_task_index.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert not (home / ".cache" / "jaxeval").exists()
    assert _snapshot(conftest.USER_CACHE) == real_before
    assert conftest.listing(conftest.USER_HF_CACHES) == hf_before

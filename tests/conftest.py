"""Test-wide setup: 8 fake CPU devices for sharding tests, offline Hugging Face, test data root,
and a temporary root of the test session's own for every cache (never the user's)."""

import atexit
import os
import pathlib
import shutil
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]


def _user_cache_home() -> pathlib.Path:
    """The user's jaxeval cache as `jaxeval.paths.cache_home` finds it (jaxeval not imported yet)."""
    root = os.environ.get("JAXEVAL_CACHE")
    if root:
        return pathlib.Path(root).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return (pathlib.Path(xdg) / "jaxeval").resolve()


def _user_hf_caches() -> tuple[pathlib.Path, ...]:
    """The user's Hugging Face caches (hub, datasets, evaluate, modules): `HF_HOME`, else
    `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`, and any cache moved elsewhere by its
    own variable."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    homes = [os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")]
    homes += [os.environ[name] for name in _HF_VARIABLES if os.environ.get(name)]
    return tuple(sorted({pathlib.Path(p).expanduser().resolve() for p in homes}))


# Hugging Face's cache variables, each pointed below the session's root (paths under huggingface/).
_HF_VARIABLES = {
    "HF_HOME": "",
    "HF_DATASETS_CACHE": "datasets",
    "HF_HUB_CACHE": "hub",
    "HUGGINGFACE_HUB_CACHE": "hub",
    "HF_ASSETS_CACHE": "assets",
    "HF_XET_CACHE": "xet",
    "TRANSFORMERS_CACHE": "hub",
    "HF_MODULES_CACHE": "modules",
    "HF_EVALUATE_CACHE": "evaluate",
    "HF_METRICS_CACHE": "metrics",
}
# Other libraries' caches and settings, below the session's root too.
_OTHER_VARIABLES = {
    "XDG_CACHE_HOME": "xdg-cache",  # anything else that follows the XDG rule
    "TORCH_HOME": "torch",
    "MPLCONFIGDIR": "matplotlib",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
    "WANDB_CACHE_DIR": "wandb-cache",
    "WANDB_CONFIG_DIR": "wandb-config",
    "WANDB_DATA_DIR": "wandb-data",
}

# The user's real caches stay untouched: found before anything is redirected, then every cache of
# the session (jaxeval's: task index, requests, kernels, compiled executables, models; Hugging
# Face's hub, datasets, evaluate and modules; torch, matplotlib, triton, W&B, anything under
# $XDG_CACHE_HOME) lives under one temporary root, removed at exit. This runs when pytest imports
# this file, before any test module imports `datasets` (which reads its paths at import).
USER_CACHE = _user_cache_home()
USER_HF_CACHES = _user_hf_caches()
TEST_ROOT = pathlib.Path(tempfile.mkdtemp(prefix="jaxeval-test-root-")).resolve()
atexit.register(shutil.rmtree, TEST_ROOT, ignore_errors=True)
for _name, _rel in _HF_VARIABLES.items():
    os.environ[_name] = str(TEST_ROOT / "huggingface" / _rel)
for _name, _rel in _OTHER_VARIABLES.items():
    os.environ[_name] = str(TEST_ROOT / _rel)


def listing(roots: tuple[pathlib.Path, ...]) -> list[tuple[str, int, int]]:
    """Every file under `roots` with its size and modification time (links not followed)."""
    out = []
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out.append((path, st.st_size, st.st_mtime_ns))
    return sorted(out)


# Must happen before jax is imported anywhere: 8 host devices so sharding tests can build meshes,
# and XLA:CPU's code generated without LLVM's optimizations: the suite compiles thousands of small
# executables and runs each a few times, so compiling dominates (measured: two generation tests
# 71 s -> 45 s). The values are the same: XLA fixes the order of every float operation and LLVM
# may not reorder them (no fast-math); the dots run in XLA's own kernels either way.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# lm-eval (the test oracle) bootstraps in a fork pool unless told not to; forking after JAX starts
# its threads can deadlock.
os.environ.setdefault("LMEVAL_DISABLE_MULTIPROC", "1")
os.environ.setdefault("DISABLE_MULTIPROC", "1")  # the name lm-eval 0.4.13 metrics.py reads
# Hermetic: no persistent XLA cache (tests that need one pass a temporary directory).
os.environ.setdefault("JAXEVAL_COMPILATION_CACHE", "off")

# jaxeval's own cache root. The real-model tests' file (SmolLM2 GGUF) comes from
# `JAXEVAL_TEST_MODELS` (`.ci/run` fetches it there:
# `JAXEVAL_CACHE=$JAXEVAL_TEST_MODELS python -m jaxeval.demo.fetch`; default `<repo>/.test-models`),
# linked into the session's root (a hard link, else a copy: the cache trusts a regular file of the
# user's, never a symbolic link), never from the user's cache.
TEST_MODELS = pathlib.Path(os.environ.get("JAXEVAL_TEST_MODELS") or REPO / ".test-models")
SESSION_CACHE = TEST_ROOT / "jaxeval"
SESSION_CACHE.mkdir()
os.environ["JAXEVAL_CACHE"] = str(SESSION_CACHE)
os.environ.pop("JAXEVAL_CACHE_PATH", None)
os.environ.pop("JAXEVAL_INDEX_CACHE", None)
if (TEST_MODELS / "models").is_dir():
    (SESSION_CACHE / "models").mkdir(mode=0o700)
    for _file in (TEST_MODELS / "models").iterdir():
        try:
            os.link(_file.resolve(), SESSION_CACHE / "models" / _file.name)
        except OSError:  # another file system, or no hard links there
            shutil.copy2(_file.resolve(), SESSION_CACHE / "models" / _file.name)

import pytest  # noqa: E402

# The benchmark rows the tests read: the first rows of each file, in the hub layout
# (`DIR/<repo>/[<config>/]<split>.jsonl`), copied into the repository by tests/helpers/copy_rows.py.
TEST_DATA = REPO / "tests" / "data"

# A skip whose reason mentions missing data fails the run: the suite must be whole on a fresh clone.
_MISSING_DATA = ("not found", "no such file", "missing data", "../shared")


def forbidden_prefixes(
    repo: pathlib.Path,
    user_cache: pathlib.Path,
    *,
    home: pathlib.Path | None = None,
    user_hf: tuple[pathlib.Path, ...] = (),
) -> tuple[str, ...]:
    """Where tests must never open a file: the user's jaxeval and Hugging Face caches, and the
    repository's real siblings (../shared, other projects) other than hidden folders (a home's
    .cache, .local, ...) and those holding the home folder (`home`, default $HOME), this Python or
    the temporary directory. A clone inside $HOME passes, and so does one beside it."""
    home = (home or pathlib.Path.home()).resolve()
    keep = {home, pathlib.Path(sys.prefix).resolve(), pathlib.Path(tempfile.gettempdir()).resolve()}
    out = [str(user_cache), *map(str, user_hf)]
    parent = repo.parent
    if parent != parent.parent:
        for sibling in sorted(parent.iterdir()):
            path = sibling.resolve() if not sibling.is_symlink() else sibling.absolute()
            if sibling.name.startswith(".") or path == repo:
                continue
            if any(k == path or path in k.parents for k in keep):
                continue
            out.append(str(sibling.absolute()))
    return tuple(p.rstrip(os.sep) + os.sep for p in out)


# Files opened while test modules are imported (under tests/data), or at any time under a
# forbidden prefix (beside the repository, or in the user's cache): both must stay empty
# (tests/test_hermetic.py, and pytest_sessionfinish below). Recorded by an audit hook, which sees
# every open() in this process.
READ_AT_IMPORT: list[str] = []
READ_BESIDE_REPO: list[str] = []
_collecting = [True]
_DATA_PREFIX = str(TEST_DATA) + os.sep
FORBIDDEN = forbidden_prefixes(REPO, USER_CACHE, user_hf=USER_HF_CACHES)


def _audit_open(event: str, args: tuple) -> None:
    if event != "open" or not isinstance(args[0], str):
        return
    path = os.path.abspath(args[0])
    if _collecting[0] and path.startswith(_DATA_PREFIX):
        READ_AT_IMPORT.append(path)
    elif path.startswith(FORBIDDEN) or path + os.sep in FORBIDDEN:
        READ_BESIDE_REPO.append(path)


sys.addaudithook(_audit_open)


def pytest_collection_finish(session: pytest.Session) -> None:
    _collecting[0] = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core, at most 4 (each holds JAX, torch and
    lm-eval: ~1.5 GB). `-n 0` runs in this process."""
    return max(1, min(4, os.cpu_count() or 1))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if READ_BESIDE_REPO:
        sys.stderr.write(
            f"\ntests read files outside the repository or in the user's cache: {sorted(set(READ_BESIDE_REPO))[:5]}; copy"
            " the rows they need into tests/data (tests/helpers/copy_rows.py)\n"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def unwritable(tmp_path):
    """A directory this process cannot create files in (root ignores modes: /proc/self then)."""
    if os.geteuid() == 0:
        yield "/proc/self"
        return
    path = tmp_path / "ro"
    path.mkdir()
    path.chmod(0o555)
    yield str(path)
    path.chmod(0o755)


@pytest.fixture(scope="session")
def data_root() -> pathlib.Path:
    """The data root for `--data_dir` and `data_files` (tests/data, inside the repository)."""
    assert TEST_DATA.is_dir(), f"{TEST_DATA} is part of the repository and must exist"
    return TEST_DATA


_BESIDE_REPORTED = [0]  # READ_BESIDE_REPO entries already blamed on a test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and len(READ_BESIDE_REPO) > _BESIDE_REPORTED[0]:
        # per test, so that it also fails under pytest-xdist, whose workers' session status is lost
        read = sorted(set(READ_BESIDE_REPO[_BESIDE_REPORTED[0] :]))
        _BESIDE_REPORTED[0] = len(READ_BESIDE_REPO)
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} read files outside the repository or in the user's cache: {read[:5]}; copy the rows it needs"
            " into tests/data (tests/helpers/copy_rows.py)"
        )
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if any(word in reason.lower() for word in _MISSING_DATA):
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} was skipped for missing data ({reason}); tests read only the rows"
                " under tests/data (add them with tests/helpers/copy_rows.py)"
            )

"""Test-wide setup: 8 fake CPU devices for sharding tests, offline Hugging Face, shared paths."""

import os

# Must happen before jax is imported anywhere: 8 host devices so sharding tests can build meshes.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# lm-eval (the test oracle) bootstraps in a fork pool unless told not to; forking after JAX starts
# its threads can deadlock.
os.environ.setdefault("LMEVAL_DISABLE_MULTIPROC", "1")
os.environ.setdefault("DISABLE_MULTIPROC", "1")  # the name lm-eval 0.4.13 metrics.py reads

import pathlib  # noqa: E402

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = (REPO.parent / "shared").resolve()
SHARED_DATA = SHARED / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA}")
    return SHARED_DATA

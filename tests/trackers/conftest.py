"""W&B kept offline and inside the test's temporary folder; the CLI's fake model."""

from __future__ import annotations

import pytest

from jaxeval.lm.base import MODELS
from tests.api import fake_lm

LOADED: list[dict] = []  # the fake model's constructor arguments, one entry per model built


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """WANDB_MODE=offline with every folder W&B writes (runs, config, cache, data, artifacts)
    under tmp_path/wandb_home; yields that folder. W&B reads its settings once per process, so
    its state is torn down before and after (a failed test's open run is finished too)."""
    import wandb

    wandb.teardown()
    home = tmp_path / "wandb_home"
    for var, sub in (
        ("WANDB_DIR", ""),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_DATA_DIR", "data"),
        ("WANDB_ARTIFACT_DIR", "artifacts"),
    ):
        (home / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(home / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield home
    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()


@pytest.fixture
def fake_model():
    """`--model fake`: the deterministic fake LM; records each construction in LOADED."""
    base = type(fake_lm.make_jaxeval_lm())

    class Recorded(base):
        def __init__(self, **kwargs):
            LOADED.append(kwargs)

    MODELS.add("fake", Recorded, replace=True)
    LOADED.clear()
    return LOADED

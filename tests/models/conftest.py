"""Session-wide tiny checkpoints, loaded models and jitted functions for the model tests."""

from __future__ import annotations

import functools

import pytest

from tests.helpers.tiny_models import load_torch_model, tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("tiny_models"))


@pytest.fixture(scope="session")
def tiny(tiny_root):
    """`tiny(family, **overrides) -> checkpoint dir`, each built once per session."""

    def build(family: str, **overrides) -> str:
        return tiny_checkpoint(family, root=tiny_root, **overrides)

    return build


@pytest.fixture(scope="session")
def models(tiny):
    """`models(family, **overrides) -> (LoadedModel, torch model)`, each loaded once per session."""
    from jaxeval.models import load_model

    @functools.cache
    def get(family: str, **overrides):
        # lists were made tuples to be cache keys; configs want their lists back
        overrides = {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}
        path = tiny(family, **overrides)
        return load_model(path), load_torch_model(path)

    def call(family: str, **overrides):
        return get(family, **{k: _hashable(v) for k, v in overrides.items()})

    return call


def _hashable(v):
    if isinstance(v, dict):
        return _FrozenDict(v)
    if isinstance(v, list):
        return tuple(v)
    return v


class _FrozenDict(dict):
    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))

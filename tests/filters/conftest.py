"""Helpers shared by the filter tests: run an lm-eval 0.4.13 filter on the same inputs."""

import pytest


@pytest.fixture(scope="session")
def lm_filter():
    pytest.importorskip("lm_eval.filters")
    from lm_eval.api.registry import get_filter

    def apply(name, resps, docs, **kwargs):
        return list(get_filter(name)(**kwargs).apply(resps, docs))

    return apply

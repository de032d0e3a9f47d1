"""A non-finite scored log-likelihood is an error naming the first such request: its task,
document, index, rolling window, and float32 as the remedy."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jaxeval.api.instance import Instance
from jaxeval.errors import JaxevalError
from jaxeval.lm.jax_lm import JaxLM
from jaxeval.lm.non_finite import non_finite_error
from jaxeval.models import load_model
from jaxeval.platform.mesh import make_mesh
from tests.helpers.tiny_models import tiny_checkpoint


def test_the_first_non_finite_request_is_named():
    ll = np.array([-1.0, -2.0, np.inf, np.nan], np.float32)
    where = {2: {"task": "arc_easy", "doc": 7, "index": 3}}
    err = non_finite_error(ll, where.get)
    text = str(err)
    assert isinstance(err, JaxevalError) and text.count("\n") == 1
    assert text.startswith("task 'arc_easy', field 'dtype', document 7: ")
    assert "(inf) for request 2 of this call (index 3 among its document's requests)" in text
    assert "2 of 4 scored requests are non-finite" in text and "dtype=float32" in text


@pytest.fixture(scope="module")
def nan_lm():
    loaded = load_model(tiny_checkpoint("llama"), mesh=make_mesh("single"), dtype="float32")
    nan = jax.tree.map(lambda x: x * np.float32(np.nan), loaded.params)
    return JaxLM(pretrained=dataclasses.replace(loaded, params=nan), max_length=64)


def test_a_nan_model_names_task_document_and_request(nan_lm):
    requests = [
        Instance("loglikelihood", {}, ("The sky is", " blue"), i, ("sky_task", 5, 1))
        for i in range(2)
    ]
    with pytest.raises(JaxevalError) as err:
        nan_lm.loglikelihood(requests, disable_tqdm=True)
    text = str(err.value)
    assert text.startswith("task 'sky_task', field 'dtype', document 5: ")
    assert "(nan) for request 0 of this call (index 0 among" in text and "float32" in text


def test_a_nan_rolling_window_is_named(nan_lm):
    requests = [
        Instance("loglikelihood_rolling", {}, ("word " * 150,), 0, ("wiki", 3, 1)),
    ]
    with pytest.raises(JaxevalError) as err:
        nan_lm.loglikelihood_rolling(requests, disable_tqdm=True)
    text = str(err.value)
    assert text.startswith("task 'wiki', field 'dtype', document 3: ")
    assert (
        "request 0 of this call (index 0 among its document's requests, rolling window 0)" in text
    )

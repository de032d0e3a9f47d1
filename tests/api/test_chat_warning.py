"""lm-eval's warning when an instruct or chat checkpoint runs without a chat template: one line."""

from __future__ import annotations

import logging

import pytest

from jaxeval import preflight
from jaxeval.errors import JaxevalError


@pytest.mark.parametrize(
    "model_args, template, warns",
    [
        ("pretrained=HuggingFaceTB/SmolLM2-135M-Instruct,dtype=float32", False, True),
        ({"pretrained": "/models/Qwen2.5-7B-Chat", "dtype": "bfloat16"}, False, True),
        ("pretrained=/m,gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf", False, True),
        ("pretrained=HuggingFaceTB/SmolLM2-135M-Instruct", True, False),
        ("pretrained=HuggingFaceTB/SmolLM2-135M-Instruct", "chatml", False),
        ("pretrained=meta-llama/Llama-3.1-8B,dtype=bfloat16", False, False),
        (None, False, False),
    ],
)
def test_warns_as_lm_eval_does(model_args, template, warns, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxeval.chat_template"):
        assert preflight.warn_chat_model_without_template(model_args, template) is warns
    lines = [r.getMessage() for r in caplog.records if r.name == "jaxeval.chat_template"]
    assert len(lines) == (1 if warns else 0)
    if warns:
        assert "--apply_chat_template" in lines[0] and "\n" not in lines[0]


def test_the_run_warns_before_it_loads_anything(caplog):
    import jaxeval

    with caplog.at_level(logging.WARNING, logger="jaxeval.chat_template"):
        with pytest.raises(JaxevalError, match="no_such_task"):
            jaxeval.simple_evaluate(
                model="jax",
                model_args="pretrained=/nowhere/Some-Model-Instruct",
                tasks=["no_such_task"],
            )
    assert sum(r.name == "jaxeval.chat_template" for r in caplog.records) == 1


def test_chat_template_on_a_model_without_one_is_named_before_the_run(data_root):
    """lm-eval's HF backend fails deep in transformers here; jaxeval names it before any request."""
    import jaxeval
    from jaxeval.api.task_manager import TaskManager
    from jaxeval.lm.jax_lm import JaxLM
    from tests.helpers.tiny_models import tiny_checkpoint

    lm = JaxLM(pretrained=tiny_checkpoint("llama"))
    assert lm.tokenizer.chat_template is None
    with pytest.raises(JaxevalError, match="has no chat template") as err:
        jaxeval.simple_evaluate(
            model=lm,
            tasks=["arc_easy"],
            task_manager=TaskManager(data_dir=str(data_root)),
            limit=2,
            apply_chat_template=True,
        )
    assert err.value.field == "apply_chat_template" and "without --apply_chat_template" in str(
        err.value
    )

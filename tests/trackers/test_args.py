"""`--wandb_args`-style flags parse as lm-eval's command line parses them (its own parser is the
oracle), and bad input names the flag."""

from __future__ import annotations

import argparse

import pytest

from jaxeval.errors import JaxevalError
from jaxeval.trackers.args import merge_dict_args, split_top_level


def lm_eval_parse(words: list[str]) -> dict:
    from lm_eval._cli.utils import MergeDictAction

    parser = argparse.ArgumentParser()
    parser.add_argument("--wandb_args", nargs="+", action=MergeDictAction, default=None)
    return parser.parse_args(["--wandb_args", *words]).wandb_args


@pytest.mark.parametrize(
    "words",
    [
        ["project=evals,name=run-1"],
        ["project=evals", "name=run-1", "step=1000"],  # space-separated words merge
        ["project=a", "project=b"],  # the later key wins
        ["tags=['x','y'],notes=two words"],  # brackets keep their commas
        ["lr=3e-4,epochs=2,resume=True,offline=false"],  # typed values
        ['{"project": "evals", "config": {"lr": 0.1}}'],  # a JSON object, taken whole
        ["name='quoted,name'"],  # quotes keep their commas and become a plain string
    ],
)
def test_matches_lm_eval(words):
    assert merge_dict_args(words, "wandb_args") == lm_eval_parse(words)


def test_config_file_dicts_and_absent_flags():
    assert merge_dict_args({"project": "p"}, "wandb_args") == {"project": "p"}
    assert merge_dict_args(None, "wandb_args") == {}
    assert split_top_level("a=1,b=[1,2],c='x,y',") == ["a=1", "b=[1,2]", "c='x,y'"]


@pytest.mark.parametrize(
    "words, needle",
    [(["project"], "entry 'project' is not key=value"), (["{not json"], "not valid JSON")],
)
def test_bad_input_names_the_flag(words, needle):
    with pytest.raises(JaxevalError, match=needle) as err:
        merge_dict_args(words, "wandb_args")
    assert "field 'wandb_args'" in str(err.value)

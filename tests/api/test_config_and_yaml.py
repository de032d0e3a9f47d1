"""TaskConfig parsing, YAML include/!function semantics and their error messages."""

from __future__ import annotations

import textwrap

import pytest

from jaxeval.api.config import GroupConfig, TaskConfig
from jaxeval.api.yaml_loader import load_yaml
from jaxeval.errors import JaxevalError


def test_defaults_match_lm_eval():
    from lm_eval.config.task import TaskConfig as LmTaskConfig

    ours = TaskConfig(task="t", output_type="generate_until")
    theirs = LmTaskConfig(task="t", output_type="generate_until")
    assert ours.generation_kwargs == theirs.generation_kwargs
    assert ours.target_delimiter == theirs.target_delimiter
    assert ours.fewshot_delimiter == theirs.fewshot_delimiter
    assert ours.repeats == theirs.repeats
    mc = TaskConfig(task="t", output_type="multiple_choice", generation_kwargs=None)
    assert mc.generation_kwargs is None


def test_every_lm_eval_field_exists():
    import dataclasses

    from lm_eval.config.task import TaskConfig as LmTaskConfig

    ours = {f.name for f in dataclasses.fields(TaskConfig)}
    theirs = {f.name for f in dataclasses.fields(LmTaskConfig)}
    assert theirs <= ours


def test_generation_kwargs_until_defaults_to_fewshot_delimiter_and_temperature_is_float():
    cfg = TaskConfig(
        task="t", generation_kwargs={"temperature": 0, "max_gen_toks": 5}, fewshot_delimiter="\n"
    )
    assert cfg.generation_kwargs == {"temperature": 0.0, "max_gen_toks": 5, "until": ["\n"]}
    assert isinstance(cfg.generation_kwargs["temperature"], float)


def test_fewshot_config_inherits_task_fields():
    cfg = TaskConfig(
        task="t",
        output_type="multiple_choice",
        doc_to_text="q",
        fewshot_split="dev",
        target_delimiter=":",
        fewshot_config={"sampler": "first_n", "doc_to_text": "other"},
    )
    assert cfg.fewshot.sampler == "first_n"
    assert cfg.fewshot.split == "dev"
    assert cfg.fewshot.doc_to_text == "other"
    assert cfg.fewshot.target_delimiter == ":"


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"task": "t", "doc_to_txt": "q"}, "doc_to_txt"),
        ({"task": "t", "output_type": "multiple_choise"}, "output_type"),
        ({"task": "t", "num_fewshot": -1}, "num_fewshot"),
        ({"task": "t", "repeats": 0}, "repeats"),
        ({"task": "t", "metric_list": [{"aggregation": "mean"}]}, "metric_list"),
        ({"task": "t", "fewshot_config": {"sampler": "first_n", "splitt": "dev"}}, "splitt"),
    ],
)
def test_bad_config_names_task_file_and_field(raw, field):
    with pytest.raises(JaxevalError) as e:
        TaskConfig.from_dict(raw, source="my.yaml")
    msg = str(e.value)
    assert "task 't'" in msg and "my.yaml" in msg and f"'{field}'" in msg


def test_unknown_key_suggests_the_close_name():
    with pytest.raises(JaxevalError, match="did you mean 'doc_to_text'"):
        TaskConfig.from_dict({"task": "t", "doc_to_txt": "q"})


def test_group_config_normalises_like_lm_eval():
    g = GroupConfig(
        group="g", task="a", aggregate_metric_list={"metric": "acc", "filter_list": "none"}
    )
    assert g.task == ["a"]
    assert g.aggregate_metric_list[0].filter_list == ["none"]
    assert g.aggregate_metric_list[0].weight_by_size is True
    with pytest.raises(JaxevalError, match="only 'mean'"):
        GroupConfig(group="g", aggregate_metric_list=[{"metric": "acc", "aggregation": "median"}])


def test_include_merges_in_order_local_keys_win_and_functions_resolve(tmp_path):
    (tmp_path / "utils.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "base.yaml").write_text(
        "output_type: multiple_choice\ndoc_to_text: base\ntask_list: [x]\n"
    )
    (tmp_path / "mid.yaml").write_text("include: base.yaml\ndoc_to_text: mid\ndescription: d\n")
    (tmp_path / "t.yaml").write_text(
        textwrap.dedent("""\
        include: mid.yaml
        task: t
        description: mine
        process_docs: !function utils.double
        """)
    )
    cfg = load_yaml(tmp_path / "t.yaml")
    assert cfg["doc_to_text"] == "mid" and cfg["description"] == "mine"
    assert cfg["output_type"] == "multiple_choice"
    assert "task_list" not in cfg and "include" not in cfg
    assert cfg["process_docs"](21) == 42


def test_include_cycle_is_reported(tmp_path):
    (tmp_path / "a.yaml").write_text("include: b.yaml\ntask: a\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    with pytest.raises(JaxevalError, match="include cycle"):
        load_yaml(tmp_path / "a.yaml")


def test_missing_function_and_module_are_clear(tmp_path):
    (tmp_path / "utils.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "a.yaml").write_text("task: a\nprocess_docs: !function utils.g\n")
    with pytest.raises(JaxevalError, match="has no function 'g'") as e:
        load_yaml(tmp_path / "a.yaml")
    assert "a.yaml" in str(e.value)
    (tmp_path / "b.yaml").write_text("task: b\nprocess_docs: !function nosuchmodule_xyz.g\n")
    with pytest.raises(JaxevalError, match="module 'nosuchmodule_xyz' is not beside the YAML"):
        load_yaml(tmp_path / "b.yaml")


def test_malformed_yaml_names_the_file(tmp_path):
    (tmp_path / "bad.yaml").write_text("task: [unclosed\n")
    with pytest.raises(JaxevalError, match="malformed YAML") as e:
        load_yaml(tmp_path / "bad.yaml")
    assert "bad.yaml" in str(e.value)


def test_to_dict_drops_none_and_shows_function_source(tmp_path):
    (tmp_path / "utils.py").write_text("def proc(ds):\n    return ds\n")
    (tmp_path / "t.yaml").write_text(
        "task: t\noutput_type: loglikelihood\nprocess_docs: !function utils.proc\n"
    )
    cfg = TaskConfig.from_dict(load_yaml(tmp_path / "t.yaml"))
    d = cfg.to_dict()
    assert "dataset_name" not in d
    assert d["process_docs"].startswith("def proc(ds)")

"""A run's arguments have one definition, `RunConfig`'s fields (jaxeval/run_config.py):
`simple_evaluate`'s signature is made from them and is lm-eval's, the `jaxeval run` options of the
same names fill them, and the evaluator reads the object. So a lm-eval option added to the option
table reaches the evaluator by one field added outside `cli/`. The results' `timing` block has one
writer (`jaxeval.evaluator.add_timing`)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import logging
import pathlib
import re

import pytest

import jaxeval
from jaxeval import evaluator
from jaxeval.cli import run as run_command
from jaxeval.cli.run import RunCommand
from jaxeval.cli.run_args import COMMAND_OPTIONS
from jaxeval.errors import JaxevalError
from jaxeval.platform import phases
from jaxeval.run_config import RunConfig
from tests.api import fake_lm

REPO = pathlib.Path(__file__).resolve().parent.parent


def _parameters(sig: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def test_simple_evaluate_takes_lm_evals_parameters_in_its_order():
    from lm_eval.evaluator import simple_evaluate as theirs

    ours = inspect.signature(jaxeval.simple_evaluate)
    assert _parameters(ours) == _parameters(inspect.signature(theirs))


def test_simple_evaluates_parameters_are_the_configs_fields():
    assert _parameters(inspect.signature(jaxeval.simple_evaluate)) == _parameters(
        RunConfig.signature()
    )
    assert list(inspect.signature(evaluator._simple_evaluate).parameters) == ["config"]


def test_positional_and_keyword_calls_make_the_same_config():
    by_position = RunConfig.from_call(("jax", "pretrained=D", ["arc_easy"], 5), {"limit": 3})
    by_keyword = RunConfig(
        model="jax", model_args="pretrained=D", tasks=["arc_easy"], num_fewshot=5, limit=3
    )
    assert by_position == by_keyword
    with pytest.raises(TypeError, match="too many positional"):
        RunConfig.from_call(tuple(range(40)), {})
    with pytest.raises(TypeError, match="multiple values"):
        RunConfig.from_call(("jax",), {"model": "jax", "tasks": ["t"]})


def test_an_unknown_argument_names_the_nearest():
    with pytest.raises(JaxevalError, match="did you mean 'limit'") as e:
        jaxeval.simple_evaluate(model="jax", tasks=["t"], limt=3)
    assert e.value.field == "limt"
    with pytest.raises(JaxevalError, match="did you mean 'gen_kwargs'"):
        RunConfig.from_cli({"tasks": ["t"]}, model="jax", gen_kwarg={})


def test_the_config_is_frozen_keyword_only_and_checked():
    with pytest.raises(TypeError):
        RunConfig("jax", None, ["t"])  # type: ignore[misc]
    config = RunConfig(model="jax", tasks=["t"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.limit = 3  # type: ignore[misc]
    with pytest.raises(JaxevalError, match="--limit and --samples cannot be used together"):
        RunConfig(model="jax", tasks=["t"], limit=2, samples={"t": [0]})
    with pytest.raises(JaxevalError, match="no tasks given"):
        RunConfig(model="jax", tasks=[])


def test_every_run_option_is_a_run_argument_or_the_commands_own():
    """A new option in `jaxeval run`'s parser is either one of the commands' own (`COMMAND_OPTIONS`,
    in cli/) or a `RunConfig` field of the same name: the one edit outside cli/."""
    parser = RunCommand().parser()
    dests = {a.dest for a in parser._actions if a.dest != "help"}
    fields = set(RunConfig.names())
    assert not COMMAND_OPTIONS & fields
    stray = sorted(dests - fields - COMMAND_OPTIONS)
    assert not stray, f"add these as RunConfig fields, or to cli COMMAND_OPTIONS: {stray}"


@pytest.fixture
def captured(monkeypatch):
    """The config the evaluator receives; the run stops there (a process that does not report)."""
    seen: list[RunConfig] = []

    def evaluate(config):
        seen.append(config)
        return None

    monkeypatch.setattr(evaluator, "_simple_evaluate", evaluate)
    return seen


def test_the_command_line_reaches_the_evaluator(captured, monkeypatch, tmp_path, data_root):
    """Every run argument the command line sets arrives in the evaluator's `RunConfig`."""
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")  # --confirm_run_unsafe_code sets it
    monkeypatch.setattr(logging.getLogger(), "level", logging.getLogger().level)  # --verbosity
    argv = ["--model", "fake", "--model_args", "pretrained=/m", "k=2", "--tasks", "arc_easy"]
    argv += ["--num_fewshot", "2", "--batch_size", "4", "--max_batch_size", "8"]
    argv += ["--device", "cpu", "--use_cache", str(tmp_path / "c"), "--cache_requests", "refresh"]
    argv += ["--limit", "3", "--bootstrap_iters", "5", "--check_integrity", "--write_out"]
    argv += ["--log_samples", "--output_path", str(tmp_path / "out"), "--system_instruction", "s"]
    argv += ["--apply_chat_template", "--fewshot_as_multiturn", "false"]
    argv += ["--gen_kwargs", "temperature=0", "--verbosity", "WARNING", "--predict_only"]
    argv += ["--seed", "1,2,3,4", "--confirm_run_unsafe_code", "--metadata", "a=1"]
    argv += ["--data_dir", str(data_root)]
    assert run_command.RunCommand()(argv) == 0
    (config,) = captured
    assert config.task_manager is not None and config.evaluation_tracker is None
    given = {
        k: v for k, v in vars(config).items() if k not in ("task_manager", "evaluation_tracker")
    }
    assert given == {
        "model": "fake",
        "model_args": "pretrained=/m,k=2",
        "tasks": ["arc_easy"],
        "num_fewshot": 2,
        "batch_size": 4,
        "max_batch_size": 8,
        "device": "cpu",
        "use_cache": str(tmp_path / "c"),
        "cache_requests": True,
        "rewrite_requests_cache": True,
        "delete_requests_cache": False,
        "limit": 3.0,
        "samples": None,
        "bootstrap_iters": 5,
        "check_integrity": True,
        "write_out": True,
        "log_samples": True,
        "system_instruction": "s",
        "apply_chat_template": True,
        "fewshot_as_multiturn": False,
        "gen_kwargs": {"temperature": 0},
        "verbosity": "WARNING",
        "predict_only": True,
        "random_seed": 1,
        "numpy_random_seed": 2,
        "torch_random_seed": 3,
        "fewshot_random_seed": 4,
        "confirm_run_unsafe_code": True,
        "metadata": {"a": 1},
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class WithNewOption(RunConfig):
    """RunConfig with one more field: what adding a lm-eval option outside cli/ takes."""

    new_option: int = 7


class RunWithNewOption(RunCommand):
    """`jaxeval run` with the option in its parser (the edits inside cli/)."""

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--new_option", type=int, default=7)


def test_a_new_option_reaches_the_evaluator_by_one_field(captured, monkeypatch, data_root):
    """The field alone (no other edit outside cli/) puts the option in `simple_evaluate`'s
    signature, last, with its default, and carries it from the command line and from a call to
    the evaluator."""
    assert list(WithNewOption.signature().parameters)[-1] == "new_option"
    assert WithNewOption.signature().parameters["new_option"].default == 7
    # from the command line
    monkeypatch.setattr(run_command, "RunConfig", WithNewOption)
    argv = ["--model", "fake", "--tasks", "arc_easy", "--new_option", "3"]
    assert RunWithNewOption()([*argv, "--data_dir", str(data_root)]) == 0
    # from simple_evaluate, by keyword and by position
    monkeypatch.setattr(evaluator, "RunConfig", WithNewOption)
    jaxeval.simple_evaluate(model="fake", tasks=["arc_easy"], new_option=4)
    positional = [None] * len(RunConfig.names())
    jaxeval.simple_evaluate("fake", None, ["arc_easy"], *positional[3:], 5)
    assert [c.new_option for c in captured] == [3, 4, 5]
    assert all(isinstance(c, WithNewOption) for c in captured)


def run_parameter_lists(source: str, names: tuple[str, ...]) -> list[str]:
    """Functions in `source` whose parameters hold more than half of the run's arguments: a second
    hand-written copy of the list."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {a.arg for a in (*node.args.args, *node.args.kwonlyargs)}
            if len(params & set(names)) > len(names) // 2:
                out.append(node.name)
    return out


def test_the_parameter_list_check_finds_a_copy():
    names = RunConfig.names()
    copy = f"def simple_evaluate({', '.join(names)}):\n    pass\n"
    assert run_parameter_lists(copy, names) == ["simple_evaluate"]
    assert run_parameter_lists("def evaluate(lm, limit, samples):\n    pass\n", names) == []


def test_no_module_writes_the_run_arguments_out_again():
    names = RunConfig.names()
    copies = {
        str(path.relative_to(REPO)): found
        for path in sorted((REPO / "jaxeval").rglob("*.py"))
        if (found := run_parameter_lists(path.read_text(), names))
    }
    assert not copies, f"take a RunConfig instead of its fields: {copies}"


# an assignment to a results dict's top-level "timing" key (not `results["config"]["timing"]`)
TIMING_WRITE = re.compile(r"""\w\[["']timing["']\]\s*=(?!=)""")


def test_the_timing_check_finds_a_writer():
    assert TIMING_WRITE.search('results["timing"] = clock.block()')
    assert not TIMING_WRITE.search('results["config"]["timing"] = _timing(clock, base)')


def test_the_timing_block_has_one_writer():
    writers = [
        f"{path.relative_to(REPO)}:{i}"
        for path in sorted((REPO / "jaxeval").rglob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if TIMING_WRITE.search(line)
    ]
    assert len(writers) == 1 and writers[0].startswith("jaxeval/evaluator.py:"), writers


def test_the_clocks_owner_writes_the_timing_block_once(data_root):
    from jaxeval.api.task_manager import TaskManager

    run = dict(tasks=["arc_easy"], limit=2, bootstrap_iters=0, log_samples=False)
    run["task_manager"] = TaskManager(data_dir=str(data_root))
    own = jaxeval.simple_evaluate(model=fake_lm.make_jaxeval_lm(), **run)
    assert set(own["timing"]["phases_s"]) == set(phases.PHASES)  # its own clock: written
    clock = phases.begin_run()
    try:  # under the command's clock the command writes it, at its run's end
        inner = jaxeval.simple_evaluate(model=fake_lm.make_jaxeval_lm(), **run)
        assert "timing" not in inner
        evaluator.add_timing(inner)
        assert set(inner["timing"]) == set(own["timing"])
        assert inner["timing"]["wall_s"] == pytest.approx(clock.wall(), abs=0.01)
    finally:
        phases.end_run()
    with pytest.raises(RuntimeError, match="run's clock"):
        evaluator.add_timing({})

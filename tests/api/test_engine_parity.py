"""The task engine against lm-eval's, with the same deterministic fake model on both sides.

For each case, both evaluators build requests from the same real documents (tests/data); the
request lists (contexts, continuations, generation kwargs) must be identical, and so must every
metric value and stderr, since the model's answers are a pure function of the request.
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.api import fake_lm

pytestmark = [pytest.mark.oracle, pytest.mark.slow]
LM_EVAL_TASKS = None


def _lm_eval_tasks_dir() -> str:
    import lm_eval.tasks

    return os.path.dirname(lm_eval.tasks.__file__)


# task -> (lm-eval YAML relative to its tasks dir, {split: file under tests/data}, extra overrides)
CASES = {
    "arc_easy": (
        "arc/arc_easy.yaml",
        {"test": "ai2_arc/ARC-Easy/test.jsonl", "validation": "ai2_arc/ARC-Easy/validation.jsonl"},
        {"fewshot_split": "validation"},
    ),
    "mmlu_anatomy": (
        "mmlu/default/mmlu_anatomy.yaml",
        {"test": "mmlu/anatomy/test.jsonl", "dev": "mmlu/anatomy/dev.jsonl"},
        {},
    ),
    "mmlu_astronomy": (
        "mmlu/default/mmlu_astronomy.yaml",
        {"test": "mmlu/astronomy/test.jsonl", "dev": "mmlu/astronomy/dev.jsonl"},
        {},
    ),
    "mmlu_abstract_algebra": (
        "mmlu/default/mmlu_abstract_algebra.yaml",
        {"test": "mmlu/abstract_algebra/test.jsonl", "dev": "mmlu/abstract_algebra/dev.jsonl"},
        {},
    ),
    "lambada_openai": ("lambada/lambada_openai.yaml", {"test": "lambada_openai/test.jsonl"}, {}),
    "gsm8k": ("gsm8k/gsm8k.yaml", {"test": "gsm8k/test.jsonl", "train": "gsm8k/train.jsonl"}, {}),
}
GROUP_YAML = textwrap.dedent("""\
    group: mini_mmlu
    task:
      - mmlu_anatomy
      - mmlu_astronomy
      - mmlu_abstract_algebra
    aggregate_metric_list:
      - metric: acc
        weight_by_size: True
    metadata:
      version: 2
    """)


def _yaml_block(d: dict) -> str:
    import yaml

    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)


@pytest.fixture(scope="module")
def oracle_dirs(tmp_path_factory, data_root):
    """lm-eval: YAMLs that include its own task files and point them at the local data.
    jaxeval: only the group file (its tasks come from the built-in library + --data_dir)."""
    lm_dir = tmp_path_factory.mktemp("lm_eval_tasks")
    for name, (rel, files, extra) in CASES.items():
        cfg = {
            "include": os.path.join(_lm_eval_tasks_dir(), rel),
            "task": name,
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {s: str(data_root / f) for s, f in files.items()}},
            **extra,
        }
        (lm_dir / f"{name}.yaml").write_text(_yaml_block(cfg))
    (lm_dir / "mini_mmlu.yaml").write_text(GROUP_YAML)
    jx_dir = tmp_path_factory.mktemp("jaxeval_tasks")
    (jx_dir / "mini_mmlu.yaml").write_text(GROUP_YAML)
    return lm_dir, jx_dir


_LM_TM = {}


def _lm_eval_task_manager(lm_dir):
    """lm-eval indexes its whole task library (seconds); build that once per folder."""
    from lm_eval.tasks import TaskManager

    if str(lm_dir) not in _LM_TM:
        _LM_TM[str(lm_dir)] = TaskManager(include_path=str(lm_dir))
    return _LM_TM[str(lm_dir)]


def _run_lm_eval(lm_dir, tasks, num_fewshot, limit, bootstrap_iters):
    import lm_eval

    log = fake_lm.RequestLog()
    res = lm_eval.simple_evaluate(
        model=fake_lm.make_lm_eval_lm(log),
        tasks=tasks,
        num_fewshot=num_fewshot,
        limit=limit,
        bootstrap_iters=bootstrap_iters,
        log_samples=False,
        task_manager=_lm_eval_task_manager(lm_dir),
    )
    return res, log


def _run_jaxeval(jx_dir, data_root, tasks, num_fewshot, limit, bootstrap_iters):
    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    overrides = {n: extra for n, (_, _, extra) in CASES.items() if extra}
    specs = [{"task": t, **overrides[t]} if t in overrides else t for t in tasks]
    log = fake_lm.RequestLog()
    tm = TaskManager(str(jx_dir), data_dir=str(data_root))
    res = jaxeval.simple_evaluate(
        model=fake_lm.make_jaxeval_lm(log),
        tasks=specs,
        num_fewshot=num_fewshot,
        limit=limit,
        bootstrap_iters=bootstrap_iters,
        log_samples=False,
        task_manager=tm,
    )
    return res, log


def _assert_same_results(ours: dict, theirs: dict, names: list[str]) -> None:
    for name in names:
        a, b = ours["results"][name], theirs["results"][name]
        keys = {k for k in b if "," in k}
        assert keys == {k for k in a if "," in k}, name
        for k in sorted(keys):
            assert a[k] == b[k], (name, k, a[k], b[k])
        assert a["sample_len"] == b["sample_len"]
        assert a["alias"] == b["alias"]


@pytest.mark.parametrize(
    "task,num_fewshot,limit",
    [
        ("arc_easy", 0, 40),
        ("arc_easy", 3, 25),
        ("mmlu_anatomy", 0, 30),
        ("mmlu_anatomy", 5, 20),
        ("lambada_openai", 0, 40),
        ("gsm8k", 5, 12),
        ("gsm8k", 0, 12),
    ],
)
def test_requests_and_metrics_match_lm_eval(oracle_dirs, data_root, task, num_fewshot, limit):
    lm_dir, jx_dir = oracle_dirs
    theirs, their_log = _run_lm_eval(lm_dir, [task], num_fewshot, limit, 1000)
    ours, our_log = _run_jaxeval(jx_dir, data_root, [task], num_fewshot, limit, 1000)
    for kind in their_log.calls:
        assert our_log.calls[kind] == their_log.calls[kind], kind
    assert sum(len(v) for v in our_log.calls.values()) > 0
    _assert_same_results(ours, theirs, [task])
    assert ours["n-shot"][task] == theirs["n-shot"][task]
    assert ours["higher_is_better"][task] == theirs["higher_is_better"][task]
    assert ours["n-samples"][task] == theirs["n-samples"][task]


def test_group_aggregation_matches_lm_eval(oracle_dirs, data_root):
    lm_dir, jx_dir = oracle_dirs
    theirs, _ = _run_lm_eval(lm_dir, ["mini_mmlu"], 0, 25, 1000)
    ours, _ = _run_jaxeval(jx_dir, data_root, ["mini_mmlu"], 0, 25, 1000)
    names = ["mmlu_anatomy", "mmlu_astronomy", "mmlu_abstract_algebra"]
    _assert_same_results(ours, theirs, names)
    for key in ("acc,none", "acc_stderr,none", "sample_len"):
        assert ours["results"]["mini_mmlu"][key] == pytest.approx(
            theirs["results"]["mini_mmlu"][key], rel=1e-12
        )
    assert ours["results"]["mini_mmlu"]["alias"] == theirs["results"]["mini_mmlu"]["alias"]
    assert ours["groups"]["mini_mmlu"]["acc,none"] == pytest.approx(
        theirs["groups"]["mini_mmlu"]["acc,none"], rel=1e-12
    )
    assert ours["group_subtasks"] == theirs["group_subtasks"]
    assert ours["versions"]["mini_mmlu"] == theirs["versions"]["mini_mmlu"]


@pytest.mark.parametrize("task,num_fewshot", [("arc_easy", 2), ("gsm8k", 2), ("mmlu_anatomy", 1)])
@pytest.mark.parametrize("multiturn", [True, False])
def test_chat_template_and_system_instruction_match_lm_eval(
    oracle_dirs, data_root, task, num_fewshot, multiturn
):
    import lm_eval

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    lm_dir, jx_dir = oracle_dirs
    kwargs = dict(
        num_fewshot=num_fewshot,
        limit=6,
        bootstrap_iters=0,
        log_samples=False,
        apply_chat_template=True,
        fewshot_as_multiturn=multiturn,
        system_instruction="You are a careful solver.",
    )
    their_log, our_log = fake_lm.RequestLog(), fake_lm.RequestLog()
    lm_eval.simple_evaluate(
        model=fake_lm.with_chat(fake_lm.make_lm_eval_lm(their_log)),
        tasks=[task],
        task_manager=_lm_eval_task_manager(lm_dir),
        **kwargs,
    )
    extra = CASES[task][2]
    spec = {"task": task, **extra} if extra else task
    jaxeval.simple_evaluate(
        model=fake_lm.with_chat(fake_lm.make_jaxeval_lm(our_log)),
        tasks=[spec],
        task_manager=TaskManager(str(jx_dir), data_dir=str(data_root)),
        **kwargs,
    )
    assert our_log.calls == their_log.calls
    first = next(v for v in our_log.calls.values() if v)[0][0]
    assert first.startswith("<|im_start|>system\nYou are a careful solver.")

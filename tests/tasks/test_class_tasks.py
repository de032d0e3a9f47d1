"""lm-eval's Python `class:` tasks driven through jaxeval's evaluator, against lm-eval itself.

`squad_completion` (`class: !function task.SQUADCompletion`, an lm-eval ConfigurableTask subclass)
runs on eight hand-written docs in its dataset's schema (tests/tasks/data/based-squad, hub layout).
jaxeval finds them through `--data_dir`; lm-eval reads them through a one-line subclass whose
`download` loads the same file.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from jaxeval.errors import JaxevalError
from tests.tasks import fake_lm
from tests.tasks.oracle import assert_same_requests

pytestmark = [pytest.mark.oracle, pytest.mark.slow]
DATA = Path(__file__).parent / "data"
GENERATIONS = [" Paris", " hydrogen", " the Mediterranean Sea.", " I am not sure", " chemistry"]


def _lm_eval_local_task(tmp_path: Path) -> Path:
    (tmp_path / "local_task.py").write_text(
        textwrap.dedent(f"""\
        import datasets
        from lm_eval.tasks.squad_completion.task import SQUADCompletion


        class LocalSQUADCompletion(SQUADCompletion):
            def download(self, *args, **kwargs):
                self.dataset = datasets.load_dataset(
                    "json", data_files={{"validation": "{DATA / "based-squad/validation.jsonl"}"}})
        """)
    )
    (tmp_path / "squad_completion.yaml").write_text(
        "task: squad_completion\nclass: !function local_task.LocalSQUADCompletion\n"
    )
    return tmp_path


@pytest.fixture(scope="module")
def lm_eval_tm(tmp_path_factory):
    from lm_eval.tasks import TaskManager as LmTaskManager

    return LmTaskManager(include_path=str(_lm_eval_local_task(tmp_path_factory.mktemp("cls"))))


def test_class_task_matches_lm_eval(lm_eval_tm):
    import lm_eval

    import jaxeval
    from jaxeval.api.lm_eval_task import LmEvalTask
    from jaxeval.api.task_manager import TaskManager

    tm = TaskManager(data_dir=str(DATA))
    loaded = tm.load(["squad_completion"])
    assert isinstance(loaded.tasks["squad_completion"], LmEvalTask)
    common = dict(limit=8, bootstrap_iters=1000, log_samples=True)
    their_log, our_log = fake_lm.RequestLog(), fake_lm.RequestLog()
    theirs = lm_eval.simple_evaluate(
        model=fake_lm.make_lm_eval_lm(their_log, GENERATIONS),
        tasks=["squad_completion"],
        task_manager=lm_eval_tm,
        **common,
    )
    ours = jaxeval.simple_evaluate(
        model=fake_lm.make_jaxeval_lm(our_log, GENERATIONS),
        tasks=["squad_completion"],
        task_manager=TaskManager(data_dir=str(DATA)),
        **common,
    )
    assert_same_requests(our_log, their_log)
    a, b = ours["results"]["squad_completion"], theirs["results"]["squad_completion"]
    assert {k: v for k, v in a.items() if "," in k} == {k: v for k, v in b.items() if "," in k}
    assert 0 < a["contains,none"] < 1
    assert ours["higher_is_better"] == theirs["higher_is_better"]
    assert ours["n-samples"] == theirs["n-samples"]
    keys = ("doc_id", "target", "filtered_resps", "contains")
    assert [{k: s[k] for k in keys} for s in ours["samples"]["squad_completion"]] == [
        {k: s[k] for k in keys} for s in theirs["samples"]["squad_completion"]
    ]


def test_class_task_predict_only_as_lm_eval(lm_eval_tm):
    """--predict_only calls the class's own override_metric, so a class that overrides
    process_results keeps its metric, exactly as in lm-eval."""
    import lm_eval

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    common = dict(tasks=["squad_completion"], limit=3, predict_only=True, bootstrap_iters=0)
    theirs = lm_eval.simple_evaluate(
        model=fake_lm.make_lm_eval_lm(None, GENERATIONS),
        task_manager=lm_eval_tm,
        **common,
    )
    ours = jaxeval.simple_evaluate(
        model=fake_lm.make_jaxeval_lm(None, GENERATIONS),
        task_manager=TaskManager(data_dir=str(DATA)),
        **common,
    )
    a, b = ours["results"]["squad_completion"], theirs["results"]["squad_completion"]
    assert {k for k in a if "," in k} == {k for k in b if "," in k}
    assert len(ours["samples"]["squad_completion"]) == 3


def test_a_class_that_is_not_an_lm_eval_task_is_named(tmp_path):
    from jaxeval.api.task_manager import TaskManager

    (tmp_path / "mine.py").write_text("class NotATask:\n    pass\n")
    (tmp_path / "t.yaml").write_text("task: odd\nclass: !function mine.NotATask\n")
    with pytest.raises(JaxevalError, match=r"NotATask, which is not an lm-eval Task subclass"):
        TaskManager(str(tmp_path)).load(["odd"])

"""RULER NIAH and BABILong offline, request for request against lm-eval 0.4.13's HF backend.

One tiny random Llama (2 layers, 4,224 positions, the tests' BPE tokenizer) runs each task through
`lm_eval.simple_evaluate(model="hf")` (float32, CPU) and `jaxeval.simple_evaluate(model="jax")`,
3 documents each, at RULER's `max_seq_lengths=[4096]` / BABILong's config `4k`:

* `niah_single_1`: the "repeat" haystack (no data at all);
* `niah_single_2`: the essay haystack, handed to jaxeval as `--metadata haystack=PATH` (60 lines of
  WikiText); lm-eval gets the same rows as the hub dataset it asks for
  (`baber/paul_graham_essays`), served by a stand-in for `datasets.load_dataset` in this process;
* `babilong_qa1`: five synthetic rows, read by jaxeval through `--data_dir` in the hub layout and
  served to lm-eval the same way.

Per document: the document, the prompt and generation arguments, and the generated text are
identical; per task: identical metric values. lm-eval reseeds Python's `random` before it builds
tasks, and so does jaxeval, so RULER's random needles are the same on both sides.
"""

from __future__ import annotations

import importlib
import json
import os
import time

import pytest

from tests.tasks.long_context import HAYSTACK, haystack_texts, served_hub, write_punkt_tab

pytestmark = [pytest.mark.oracle, pytest.mark.slow, pytest.mark.needs_torch]

LIMIT = 3
RULER_META = {"max_seq_lengths": [4096]}
CASES = {
    "niah_single_1": RULER_META,
    "niah_single_2": {**RULER_META, "haystack": str(HAYSTACK)},
    "babilong_qa1": {"max_seq_lengths": "4k"},
}
TIMES: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.helpers.tiny_models import make_tiny_checkpoint

    out = str(tmp_path_factory.mktemp("tiny_llama_4k"))
    return make_tiny_checkpoint("llama", out, seed=3, max_position_embeddings=4096 + 128)


@pytest.fixture(scope="module")
def punkt(tmp_path_factory):
    """nltk finds a Punkt model (RULER's essay haystack is split into sentences with it)."""
    import nltk

    root = write_punkt_tab(tmp_path_factory.mktemp("nltk_data"), haystack_texts())
    nltk.data.path.insert(0, str(root))
    yield root
    nltk.data.path.remove(str(root))


def _lm_eval_run(task: str, model_dir: str, monkeypatch) -> dict:
    import datasets
    import lm_eval
    from lm_eval.tasks import TaskManager

    from tests.tasks.oracle import lm_eval_tasks_dir

    prepare_niah = importlib.import_module("lm_eval.tasks.ruler.prepare_niah")
    folder = "ruler" if task.startswith("niah") else "babilong"
    manager = TaskManager(
        include_defaults=False,
        include_path=os.path.join(lm_eval_tasks_dir(), folder),
        metadata={"pretrained": model_dir, **CASES[task]},
    )
    with monkeypatch.context() as m:
        m.setattr(datasets, "load_dataset", served_hub(datasets.load_dataset))
        prepare_niah.get_haystack.cache_clear()
        try:
            return lm_eval.simple_evaluate(
                model="hf",
                model_args=f"pretrained={model_dir},dtype=float32",
                tasks=[task],
                device="cpu",
                batch_size=1,
                limit=LIMIT,
                bootstrap_iters=0,
                log_samples=True,
                task_manager=manager,
            )
        finally:
            prepare_niah.get_haystack.cache_clear()  # the stand-in's essays stay out of the cache


def _jaxeval_run(task: str, model_dir: str) -> dict:
    import jaxeval
    from jaxeval.api.task_manager import TaskManager
    from tests.conftest import TEST_DATA

    return jaxeval.simple_evaluate(
        model="jax",
        model_args=f"pretrained={model_dir},dtype=float32",
        tasks=[task],
        limit=LIMIT,
        bootstrap_iters=0,
        log_samples=True,
        task_manager=TaskManager(
            metadata={"pretrained": model_dir, **CASES[task]}, data_dir=str(TEST_DATA)
        ),
    )


@pytest.fixture(scope="module")
def runs(model_dir, punkt):
    return {}


@pytest.fixture
def run(runs, model_dir, monkeypatch):
    def get(task: str) -> tuple[dict, dict]:
        if task not in runs:
            start = time.perf_counter()
            theirs = _lm_eval_run(task, model_dir, monkeypatch)
            middle = time.perf_counter()
            ours = _jaxeval_run(task, model_dir)
            TIMES[task] = {"lm_eval_s": middle - start, "jaxeval_s": time.perf_counter() - middle}
            runs[task] = (ours, theirs)
        return runs[task]

    return get


def _args(sample: dict) -> list:
    return [list(a.args) if hasattr(a, "args") else list(a) for a in sample["arguments"]]


@pytest.mark.parametrize("task", list(CASES))
def test_documents_and_prompts_match_lm_eval(run, task):
    ours, theirs = run(task)
    a, b = ours["samples"][task], theirs["samples"][task]
    assert len(a) == len(b) == LIMIT
    for x, y in zip(a, b):
        assert x["doc_id"] == y["doc_id"]
        assert json.dumps(x["doc"], sort_keys=True) == json.dumps(y["doc"], sort_keys=True)
        assert _args(x) == _args(y), (task, x["doc_id"])
    prompt = _args(a[0])[0][0]
    if task.startswith("niah"):
        assert a[0]["doc"]["max_length"] == 4096
        assert 3000 < a[0]["doc"]["length"] <= 4096
        assert a[0]["doc"]["outputs"][0] in prompt
    if task == "niah_single_2":  # the needles sit in the WikiText haystack
        assert "Robert Boulter" in prompt and "The grass is green" not in prompt
    if task == "babilong_qa1":
        assert a[0]["doc"]["question"] in prompt and "Du Fu" in prompt


@pytest.mark.parametrize("task", list(CASES))
def test_generations_match_lm_eval(run, task):
    ours, theirs = run(task)
    for x, y in zip(ours["samples"][task], theirs["samples"][task]):
        assert x["resps"] == y["resps"], (task, x["doc_id"], x["resps"], y["resps"])
        assert x["filtered_resps"] == y["filtered_resps"], (task, x["doc_id"])
        assert x["resps"][0][0], (task, x["doc_id"])  # something was generated


@pytest.mark.parametrize("task", list(CASES))
def test_metrics_match_lm_eval(run, task):
    ours, theirs = run(task)
    a, b = ours["results"][task], theirs["results"][task]
    keys = sorted(k for k in b if "," in k)
    assert keys and keys == sorted(k for k in a if "," in k)
    for k in keys:
        assert a[k] == b[k], (task, k, a[k], b[k])
    for x, y in zip(ours["samples"][task], theirs["samples"][task]):
        metrics = [k for k in y if k in ("acc", "4096")]
        assert metrics and all(x[k] == y[k] for k in metrics), (task, x["doc_id"])
    print(f"{task}: {TIMES.get(task)}")

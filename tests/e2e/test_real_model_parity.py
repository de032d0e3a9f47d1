"""End to end with a real (tiny, random) model: jaxeval's JAX path against lm-eval's HF backend.

One tiny Llama (BOS-adding tokenizer, max 512 positions, so long prompts are left-truncated and
WikiText pages span several rolling windows) runs the same tasks through `lm_eval.simple_evaluate`
(model "hf", float32, CPU) and `jaxeval.simple_evaluate` (model "jax"). Per request: log-likelihoods
within 1e-4 absolute (+1e-6 relative for rolling sums), identical is_greedy, identical generated
text. Per task: identical accuracy-type metrics; perplexities within the same tolerance.
"""

from __future__ import annotations

import math

import pytest

from tests.api.test_engine_parity import CASES as API_CASES
from tests.tasks.cases import CASES as TASK_CASES
from tests.tasks.oracle import Case, write_lm_eval_overrides

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

LIMITS = {
    "arc_easy": 16,
    "mmlu_anatomy": 12,
    "lambada_openai": 16,
    "hellaswag": 8,
    "winogrande": 12,
    "boolq": 8,
    "wikitext": 2,
    "gsm8k": 3,
    "drop": 4,
    "piqa": 12,
    "gsm8k_cot": 2,
}
FEWSHOT = {
    "arc_easy": 2,
    "mmlu_anatomy": 2,
    "hellaswag": 0,
    "winogrande": 0,
    "boolq": 0,
    "wikitext": 0,
    "lambada_openai": 0,
    "gsm8k": 2,
    "drop": 0,
    "piqa": 1,
    "gsm8k_cot": None,
}
GEN_KWARGS = "max_gen_toks=12"


def _cases() -> dict[str, Case]:
    from tests.conftest import TEST_DATA

    out = {
        n: TASK_CASES[n]
        for n in ("hellaswag", "winogrande", "boolq", "wikitext", "drop", "piqa", "gsm8k_cot")
    }
    for name in ("arc_easy", "mmlu_anatomy", "lambada_openai", "gsm8k"):
        rel, files, extra = API_CASES[name]
        out[name] = Case(name, rel, TEST_DATA, files, extra, via="data_files")
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.helpers.tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint("llama", str(tmp_path_factory.mktemp("tiny_llama")), seed=3)


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory, data_root):
    import lm_eval
    from lm_eval.tasks import TaskManager as LmTaskManager

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    cases = _cases()
    lm_dir = tmp_path_factory.mktemp("lm_eval_e2e")
    write_lm_eval_overrides(list(cases.values()), lm_dir)
    per_task = {}
    lm_tm = LmTaskManager(include_path=str(lm_dir))
    jx_tm = TaskManager(data_files={n: c.paths() for n, c in cases.items()})
    for name, case in cases.items():
        common = dict(
            num_fewshot=FEWSHOT[name],
            limit=LIMITS[name],
            bootstrap_iters=0,
            log_samples=True,
            gen_kwargs=GEN_KWARGS,
        )
        theirs = lm_eval.simple_evaluate(
            model="hf",
            model_args=f"pretrained={model_dir},dtype=float32",
            tasks=[name],
            device="cpu",
            batch_size=8,
            task_manager=lm_tm,
            **common,
        )
        spec = {"task": name, **case.overrides} if case.overrides else name
        ours = jaxeval.simple_evaluate(
            model="jax",
            model_args=f"pretrained={model_dir},dtype=float32",
            tasks=[spec],
            task_manager=jx_tm,
            **common,
        )
        per_task[name] = (ours, theirs)
    return per_task


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 + 1e-6 * abs(b)


@pytest.mark.parametrize("task", sorted(LIMITS))
def test_per_request_outputs_match_lm_eval_hf(runs, task):
    ours, theirs = runs[task]
    a, b = ours["samples"][task], theirs["samples"][task]
    assert len(a) == len(b) > 0
    n_checked = 0
    for x, y in zip(a, b):
        assert x["doc_id"] == y["doc_id"] and x["filter"] == y["filter"]
        assert [r.args if hasattr(r, "args") else r for r in x["arguments"]] == list(y["arguments"])
        for rx, ry in zip(x["resps"], y["resps"]):
            for vx, vy in zip(rx, ry):
                if isinstance(vy, str):
                    assert vx == vy, (task, x["doc_id"], vx, vy)
                elif isinstance(vy, (tuple, list)):
                    assert _close(vx[0], vy[0]), (task, x["doc_id"], vx, vy)
                    assert bool(vx[1]) == bool(vy[1]), (task, x["doc_id"], vx, vy)
                else:
                    assert _close(vx, vy), (task, x["doc_id"], vx, vy)
                n_checked += 1
    assert n_checked > 0


@pytest.mark.parametrize("task", sorted(LIMITS))
def test_task_metrics_match_lm_eval_hf(runs, task):
    ours, theirs = runs[task]
    a, b = ours["results"][task], theirs["results"][task]
    keys = sorted(k for k in b if "," in k and "_stderr" not in k)
    assert keys == sorted(k for k in a if "," in k and "_stderr" not in k)
    for k in keys:
        if any(
            k.startswith(p)
            for p in ("perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte")
        ):
            assert math.isclose(a[k], b[k], rel_tol=1e-4), (task, k, a[k], b[k])
        else:
            assert a[k] == b[k], (task, k, a[k], b[k])


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def chat_model_dir(model_dir, tmp_path_factory):
    import shutil

    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tiny_llama_chat")
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        src = f"{model_dir}/{name}"
        if __import__("os").path.exists(src):
            shutil.copy(src, out / name)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = CHATML
    tok.save_pretrained(out)
    return str(out)


@pytest.mark.parametrize(
    "task,multiturn", [("arc_easy", True), ("arc_easy", False), ("gsm8k", True)]
)
def test_chat_template_requests_and_outputs_match_lm_eval_hf(
    chat_model_dir, tmp_path_factory, task, multiturn
):
    import lm_eval
    from lm_eval.tasks import TaskManager as LmTaskManager

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    case = _cases()[task]
    lm_dir = tmp_path_factory.mktemp(f"lm_eval_chat_{task}")
    write_lm_eval_overrides([case], lm_dir)
    common = dict(
        num_fewshot=2,
        limit=4,
        bootstrap_iters=0,
        log_samples=True,
        gen_kwargs=GEN_KWARGS,
        apply_chat_template=True,
        fewshot_as_multiturn=multiturn,
        system_instruction="Answer briefly.",
    )
    args = f"pretrained={chat_model_dir},dtype=float32"
    theirs = lm_eval.simple_evaluate(
        model="hf",
        model_args=args,
        tasks=[task],
        device="cpu",
        batch_size=4,
        task_manager=LmTaskManager(include_path=str(lm_dir)),
        **common,
    )
    spec = {"task": task, **case.overrides} if case.overrides else task
    ours = jaxeval.simple_evaluate(
        model="jax",
        model_args=args,
        tasks=[spec],
        task_manager=TaskManager(data_files={task: case.paths()}),
        **common,
    )
    a, b = ours["samples"][task], theirs["samples"][task]
    assert len(a) == len(b) > 0
    assert a[0]["arguments"][0][0].startswith("<|im_start|>system\nAnswer briefly.")
    for x, y in zip(a, b):
        assert list(x["arguments"]) == list(y["arguments"])
        for rx, ry in zip(x["resps"], y["resps"]):
            for vx, vy in zip(rx, ry):
                if isinstance(vy, str):
                    assert vx == vy
                else:
                    assert _close(vx[0], vy[0]) and bool(vx[1]) == bool(vy[1])


def test_acc_mutual_info_matches_lm_eval_hf(model_dir, tmp_path_factory):
    """MMLU with acc_mutual_info: N conditional + N unconditional (empty-context) requests per doc."""
    import dataclasses

    import lm_eval
    from lm_eval.tasks import TaskManager as LmTaskManager

    import jaxeval
    from jaxeval.api.task_manager import TaskManager

    metrics = [
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        {"metric": "acc_mutual_info", "aggregation": "mean", "higher_is_better": True},
    ]
    case = dataclasses.replace(_cases()["mmlu_anatomy"], overrides={"metric_list": metrics})
    lm_dir = tmp_path_factory.mktemp("lm_eval_mi")
    write_lm_eval_overrides([case], lm_dir)
    common = dict(num_fewshot=1, limit=16, bootstrap_iters=0, log_samples=True)
    args = f"pretrained={model_dir},dtype=float32"
    theirs = lm_eval.simple_evaluate(
        model="hf",
        model_args=args,
        tasks=["mmlu_anatomy"],
        device="cpu",
        batch_size=8,
        task_manager=LmTaskManager(include_path=str(lm_dir)),
        **common,
    )
    ours = jaxeval.simple_evaluate(
        model="jax",
        model_args=args,
        tasks=[{"task": "mmlu_anatomy", "metric_list": metrics}],
        task_manager=TaskManager(data_files={"mmlu_anatomy": case.paths()}),
        **common,
    )
    a, b = ours["samples"]["mmlu_anatomy"], theirs["samples"]["mmlu_anatomy"]
    assert len(a) == len(b) == 16
    for x, y in zip(a, b):
        assert len(x["resps"]) == len(y["resps"]) == 8  # 4 choices x (conditional, unconditional)
        assert [r[1] for r in x["arguments"]] == [r[1] for r in y["arguments"]]
        assert all(r[0] == "" for r in x["arguments"][4:])
        for rx, ry in zip(x["resps"], y["resps"]):
            assert _close(rx[0][0], ry[0][0]) and bool(rx[0][1]) == bool(ry[0][1])
    for key in ("acc,none", "acc_mutual_info,none"):
        assert ours["results"]["mmlu_anatomy"][key] == theirs["results"]["mmlu_anatomy"][key]

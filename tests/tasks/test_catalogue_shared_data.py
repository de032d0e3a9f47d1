"""Every lm-eval catalogue task whose dataset is in the team's sample, against lm-eval, via `--data_dir`.

The enumeration: every task (not group, not tag) in lm-eval 0.4.13's installed task folder whose
`dataset_path` and `dataset_name` resolve to files under a data root by `--data_dir`'s own rule
(`jaxeval.api.data.find_local_files`, the splits the YAML names). Against `../shared/data` that is
111 tasks; `tests/data` holds the first rows of every file they resolve to, in the same layout, so
the same enumeration over `tests/data` finds the same 111 (`test_enumeration_is_the_static_list`
checks it, without reading `../shared`). They are `RUN` plus `NOT_THE_DATASET`:

* `RUN` (105): each runs through lm-eval (an override YAML that `include:`s its file and points it at
  the local JSON) and through jaxeval (the task by name, rows found through `data_dir`), with the
  same fake LM, at `LIMIT` documents and the task's own shot count. Requests, aggregates, stderrs,
  n-shot, versions, the dumped config and every per-document metric must be identical: 93 do. The
  84 MMLU tasks are the 7 catalogue MMLU families (default, continuation, generative, flan_n_shot
  loglikelihood/generative, flan_cot_fewshot/zeroshot) × the 12 stored subjects; all 84 run (one
  YAML template per family, so this costs rows, not code paths: 5 test + 5 dev rows per subject).
  Where the task's few-shot split (train) is not stored, both sides take the pool from the stored
  validation/dev split (`pool_override`); lm-eval builds the pool even at 0 shots.
* `NO_EVAL_SPLIT` (12 of `RUN`, strict xfail): `mmlu_flan_cot_zeroshot_*` evaluate cais/mmlu's
  `validation` split, which the sample does not hold (test and dev only); lm-eval raises
  `KeyError: 'validation'` and jaxeval refuses with an error naming the split (tested below).
* `NOT_THE_DATASET` (6): `--data_dir` finds files for them only through its `<dataset_name>`
  fallback, which lands on a different dataset's rows (English LAMBADA for the German, Spanish,
  French and Italian translations; English BoolQ/HellaSwag for the Korean KoBEST sets). Their
  dataset is not in the sample, so there is nothing to compare; docs/tasks.md says the same.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import TEST_DATA
from tests.tasks.oracle import (
    Case,
    assert_same_requests,
    assert_same_results,
    assert_same_samples,
    run_jaxeval,
    run_lm_eval,
    write_lm_eval_overrides,
)

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

LIMIT = 4

SUBJECTS = (
    "abstract_algebra",
    "anatomy",
    "astronomy",
    "college_computer_science",
    "formal_logic",
    "global_facts",
    "high_school_geography",
    "high_school_mathematics",
    "high_school_us_history",
    "marketing",
    "us_foreign_policy",
    "world_religions",
)
MMLU_FAMILIES = (
    "mmlu_{}",
    "mmlu_{}_continuation",
    "mmlu_{}_generative",
    "mmlu_flan_n_shot_loglikelihood_{}",
    "mmlu_flan_n_shot_generative_{}",
    "mmlu_flan_cot_fewshot_{}",
    "mmlu_flan_cot_zeroshot_{}",
)
RUN = sorted(
    [
        "arc_challenge",
        "arc_challenge_chat",
        "arc_challenge_llama",
        "arc_easy",
        "boolq",
        "boolq-seq2seq",
        "super_glue-boolq-t5-prompt",
        "drop",
        "gsm8k",
        "gsm8k_cot",
        "gsm8k_cot_llama",
        "gsm8k_cot_self_consistency",
        "gsm8k_cot_zeroshot",
        "gsm8k_llama",
        "hellaswag",
        "lambada_openai",
        "lambada_openai_cloze_yaml",
        "lambada_openai_mt_en",
        "piqa",
        "wikitext",
        "winogrande",
        *(family.format(s) for family in MMLU_FAMILIES for s in SUBJECTS),
    ]
)
# Their eval split is cais/mmlu `validation`, which the sample does not hold (it has test and dev):
# lm-eval fails with KeyError: 'validation' (and jaxeval refuses, naming the split).
NO_EVAL_SPLIT = {
    f"mmlu_flan_cot_zeroshot_{s}": "validation_split: validation; the sample stores only test and dev"
    for s in SUBJECTS
}
_FALLBACK = "--data_dir finds only {} rows (through its <dataset_name> fallback), not this dataset"
# task -> (the folder --data_dir resolves it to, why it is not compared)
NOT_THE_DATASET = {
    **{
        f"lambada_openai_mt_{lang}": (
            "lambada_openai",
            _FALLBACK.format(f"the English lambada_openai/ ({lang}/ is not in the sample)"),
        )
        for lang in ("de", "es", "fr", "it")
    },
    "kobest_boolq": ("boolq", _FALLBACK.format("English SuperGLUE boolq/ (skt/kobest_v1 boolq)")),
    "kobest_hellaswag": ("hellaswag", _FALLBACK.format("English hellaswag/ (skt/kobest_v1)")),
}


def enumerate_tasks(data_root: str) -> dict[str, dict]:
    """{task: its unresolved lm-eval config} for every lm-eval catalogue task with files under
    `data_root`, found as `--data_dir` finds them."""
    from jaxeval.api.data import find_local_files
    from jaxeval.api.task_index import Kind, index_folder, lm_eval_task_dir
    from jaxeval.api.yaml_loader import load_yaml

    root = lm_eval_task_dir()
    assert root is not None, "lm-eval's task folder is not installed"
    memo: dict = {}
    found = {}
    for name, entry in sorted(index_folder(root, "lm-eval").items()):
        if entry.kind is not Kind.TASK:
            continue
        if entry.yaml_path:
            cfg = load_yaml(entry.yaml_path, resolve_functions=False, memo=memo)
        else:
            cfg = dict(entry.cfg or {})
        files = find_local_files(
            data_root,
            dataset_path=cfg.get("dataset_path"),
            dataset_name=cfg.get("dataset_name"),
            splits=list(dict.fromkeys(_splits(cfg))),
        )
        if files:
            found[name] = {
                "cfg": cfg,
                "files": files,
                "yaml": os.path.relpath(entry.yaml_path, root) if entry.yaml_path else None,
            }
    return found


def _splits(cfg: dict) -> list[str]:
    keys = ("training_split", "validation_split", "test_split", "fewshot_split")
    return [cfg[k] for k in keys if cfg.get(k)]


def pool_override(cfg: dict, files: dict[str, str]) -> dict:
    """`fewshot_split` pointed at a stored split when the task's own pool split is not stored."""
    fewshot_config = cfg.get("fewshot_config") or {}
    if fewshot_config.get("samples") is not None:
        return {}
    wanted = cfg.get("fewshot_split") or cfg.get("training_split")
    if wanted is None or wanted in files:
        return {}
    for split in (cfg.get("validation_split"), "validation", "dev", cfg.get("test_split")):
        if split and split in files:
            return {"fewshot_split": split}
    raise AssertionError(f"no stored split for a few-shot pool: {sorted(files)}")


@pytest.fixture(scope="module")
def found() -> dict[str, dict]:
    return enumerate_tasks(str(TEST_DATA))


@pytest.fixture(scope="module")
def cases(found) -> dict[str, Case]:
    out = {}
    for name in RUN:
        info = found[name]
        files = {s: os.path.relpath(p, TEST_DATA) for s, p in info["files"].items()}
        overrides = pool_override(info["cfg"], info["files"])
        out[name] = Case(name, info["yaml"], Path(TEST_DATA), files, overrides)
    return out


@pytest.fixture(scope="module")
def lm_eval_tm(tmp_path_factory, cases):
    from lm_eval.tasks import TaskManager

    out = tmp_path_factory.mktemp("lm_eval_shared_data_overrides")
    write_lm_eval_overrides(list(cases.values()), out)
    return TaskManager(include_path=str(out))


def test_enumeration_is_the_static_list(found):
    assert not set(RUN) & set(NOT_THE_DATASET)
    assert sorted(found) == sorted([*RUN, *NOT_THE_DATASET])
    assert len(found) == 111
    for name, (folder, _) in NOT_THE_DATASET.items():
        (path,) = found[name]["files"].values()
        assert os.path.relpath(os.path.dirname(path), TEST_DATA) == folder, name
    for name in NO_EVAL_SPLIT:
        cfg = found[name]["cfg"]
        assert cfg["validation_split"] not in found[name]["files"], name
        assert not (TEST_DATA / "mmlu" / cfg["dataset_name"] / "validation.jsonl").exists()


def test_every_mmlu_family_covers_every_stored_subject():
    stored = sorted(
        p.name for p in (TEST_DATA / "mmlu").iterdir() if p.is_dir() and p.name != "all"
    )
    assert sorted(SUBJECTS) == stored
    assert sum(name.startswith("mmlu") for name in RUN) == len(MMLU_FAMILIES) * len(SUBJECTS)


def _params():
    for name in RUN:
        if name in NO_EVAL_SPLIT:
            mark = pytest.mark.xfail(strict=True, raises=KeyError, reason=NO_EVAL_SPLIT[name])
            yield pytest.param(name, marks=mark)
        else:
            yield name


@pytest.mark.parametrize("task", _params())
def test_catalogue_task_on_shared_data_matches_lm_eval(cases, lm_eval_tm, task):
    case = cases[task]
    theirs, their_log = run_lm_eval(lm_eval_tm, case, None, LIMIT, log_samples=True)
    ours, our_log = run_jaxeval(case, None, LIMIT, log_samples=True)
    assert_same_requests(our_log, their_log)
    assert_same_results(ours, theirs, task)
    assert_same_samples(ours, theirs, task)


@pytest.mark.parametrize("task", sorted(NO_EVAL_SPLIT))
def test_jaxeval_refuses_a_missing_eval_split(cases, task):
    from jaxeval.errors import JaxevalError

    with pytest.raises(JaxevalError, match="split 'validation' not in the dataset"):
        run_jaxeval(cases[task], None, LIMIT)
